package domain

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Clock is injected everywhere time matters, so the same loops run live, in
// tests and in the simulator at many times real speed.
type Clock interface {
	Now() time.Time
	// After delivers the time once d has elapsed on this clock.
	After(d time.Duration) <-chan time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not happened; it reports whether it did.
	Stop() bool
}

// InstanceFilter selects instances; zero fields do not constrain.
type InstanceFilter struct {
	// TokenHash selects the instance holding that agent token.
	TokenHash string
	Pool      string
	Runner    string
	Job       string
	CloudID   string
	States    []State
}

// TransitionRequest is one conditional update of a batch.
type TransitionRequest struct {
	ID    string
	Guard Guard
	Apply func(*Instance)
}

// TransitionResult is the outcome of one TransitionRequest: the instance as
// written, or why it was not.
type TransitionResult struct {
	Instance Instance
	Err      error
}

// Heartbeat is one instance's sign of life.
type Heartbeat struct {
	ID string
	At time.Time
}

// Lease is a named, time-limited right to act, so that a loop runs on one
// replica at a time.
type Lease struct {
	Name    string
	Holder  string
	Expires time.Time
}

// Store persists instances, jobs, pool status and leases. Every implementation runs
// the contract suite in internal/store/storetest.
type Store interface {
	// CreateInstances inserts rows all-or-nothing; ErrExists if an id is taken.
	// The store stamps Version 1 and CreatedAt, UpdatedAt and StateSince from
	// its clock, whatever the caller set.
	CreateInstances(ctx context.Context, insts []Instance) error
	// GetInstance returns ErrNotFound for an unknown id.
	GetInstance(ctx context.Context, id string) (Instance, error)
	// ListInstances returns matching rows ordered by CreatedAt, then ID.
	ListInstances(ctx context.Context, f InstanceFilter) ([]Instance, error)
	// Transition is the only way an instance changes: if the row matches g,
	// fn edits a copy, the state machine is checked (see ApplyTransition)
	// and the row is written with Version+1, atomically. It returns
	// ErrNotFound, a *ConflictError (errors.Is ErrConflict) or a
	// *TransitionError.
	Transition(ctx context.Context, id string, g Guard, fn func(*Instance)) (Instance, error)
	// TransitionBatch applies independent transitions, each with the
	// semantics of Transition, as efficiently as the backend allows. The
	// error is for the batch as a whole (a closed store); per-request
	// outcomes are in the results, in request order.
	TransitionBatch(ctx context.Context, reqs []TransitionRequest) ([]TransitionResult, error)
	// DeleteInstances removes terminated rows, ignoring unknown ids; if any row
	// is in another state nothing is deleted and the error names them.
	DeleteInstances(ctx context.Context, ids []string) error

	// RecordHeartbeat notes that the instance's agent was alive at at. It
	// is not a transition: no guard, no version change. It keeps the latest:
	// an older at is ignored.
	RecordHeartbeat(ctx context.Context, id string, at time.Time) error
	// RecordHeartbeats records many heartbeats at once, with the same
	// rules; ids with no row are ignored (the instance may be gone).
	RecordHeartbeats(ctx context.Context, beats []Heartbeat) error

	// CreateJobs inserts jobs whose id is new and leaves existing ones
	// untouched: created[i] reports which. The store stamps Version 1,
	// CreatedAt and UpdatedAt.
	CreateJobs(ctx context.Context, jobs []Job) (created []bool, err error)
	// GetJob returns ErrNotFound for an unknown id.
	GetJob(ctx context.Context, id int64) (Job, error)
	ListJobs(ctx context.Context, f JobFilter) ([]Job, error)
	// TransitionJob changes a job the way Transition changes an instance,
	// deciding with ApplyJobTransition.
	TransitionJob(ctx context.Context, id int64, g JobGuard, fn func(*Job)) (Job, error)
	TransitionJobs(ctx context.Context, reqs []JobTransitionRequest) ([]JobTransitionResult, error)
	// Commit applies every transition of c in one atomic step: if any is
	// refused (ErrNotFound, a conflict, an illegal transition) nothing is
	// written and the error is that refusal, which names the row.
	Commit(ctx context.Context, c Change) (Changed, error)
	// CommitEach applies each change as Commit does, independently of
	// the others, as efficiently as the backend allows. The error is for
	// the batch as a whole; per-change outcomes are in the results, in
	// order.
	CommitEach(ctx context.Context, cs []Change) ([]ChangeResult, error)
	// DeleteJobs removes final jobs (completed, rejected) last changed
	// before the instant, and reports how many.
	DeleteJobs(ctx context.Context, before time.Time) (int, error)

	PutPoolStatus(ctx context.Context, s PoolStatus) error
	ListPoolStatus(ctx context.Context) ([]PoolStatus, error)

	// AcquireLease takes or renews name for holder until now+ttl; it reports
	// false (and the current lease) when another holder has it unexpired. A
	// lease is expired from its Expires instant on.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, bool, error)
	// ReleaseLease gives the lease up if holder has it.
	ReleaseLease(ctx context.Context, name, holder string) error

	Close() error
}

// CloudState is the provider's view of a machine, named as EC2 names them.
type CloudState string

const (
	CloudPending      CloudState = "pending"
	CloudRunning      CloudState = "running"
	CloudStopping     CloudState = "stopping"
	CloudStopped      CloudState = "stopped"
	CloudShuttingDown CloudState = "shutting-down"
	CloudTerminated   CloudState = "terminated"
)

// CloudInstance is one machine as the provider describes it.
type CloudInstance struct {
	ID           string
	State        CloudState
	Tags         map[string]string
	InstanceType string
	UsageClass   string
	LaunchedAt   time.Time
}

// LaunchSpec asks the cloud for Count machines of one shape. The provider
// tags every machine with Tags; ClientToken makes a retried call idempotent.
// The provider renders Agent into its launch data (cloud-init on EC2, an
// environment file for local processes), so the machine's agent can find
// the control plane.
type LaunchSpec struct {
	Runner      RunnerSpec
	ImageID     string
	Count       int
	Tags        map[string]string
	ClientToken string
	Agent       AgentBootstrap
}

// AgentBootstrap is what a new machine's agent needs to introduce itself:
// where the control plane is, the launch it belongs to, and the launch's
// bootstrap secret (a credential, shared by the machines of one launch,
// valid until each has exchanged it for its own token).
type AgentBootstrap struct {
	URL      string
	LaunchID string
	Secret   string `json:"-"`
}

// CloudFilter selects machines; zero fields do not constrain. Terminated
// machines are included only when asked for by ID.
type CloudFilter struct {
	IDs  []string
	Tags map[string]string
}

// Cloud is the compute provider. Batch calls take at most MaxBatch ids; the
// caller splits larger sets.
type Cloud interface {
	// Create launches machines like an instant fleet. On partial fulfilment
	// it returns the machines it did create together with an error that
	// wraps ErrInsufficientCapacity; the caller decides their fate.
	Create(ctx context.Context, spec LaunchSpec) ([]CloudInstance, error)
	Start(ctx context.Context, ids []string) error
	Stop(ctx context.Context, ids []string) error
	Terminate(ctx context.Context, ids []string) error
	Tag(ctx context.Context, ids []string, tags map[string]string) error
	List(ctx context.Context, f CloudFilter) ([]CloudInstance, error)
	// ResolveImage turns an image name from the configuration into the
	// provider's image id (an AMI id on EC2).
	ResolveImage(ctx context.Context, name string) (string, error)
}

// MaxBatch is the most ids bullpen sends in one start, stop, terminate or
// tag call (seed 000: terminations in groups of 50).
const MaxBatch = 50

// Cloud errors, wrapped by *CloudError.
var (
	ErrInsufficientCapacity = errors.New("insufficient capacity")
	ErrThrottled            = errors.New("request throttled")
	ErrUnknownInstance      = errors.New("unknown instance")
	ErrUnknownImage         = errors.New("unknown image")
	ErrInvalidRequest       = errors.New("invalid request")
)

// CloudError says which call failed and why; Code is the provider's code.
type CloudError struct {
	Op   string // EC2 operation name, e.g. "StartInstances"
	Code string
	Err  error
}

func (e *CloudError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("%s: %s: %v", e.Op, e.Code, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Op, e.Err)
}

func (e *CloudError) Unwrap() error { return e.Err }

// Tag keys bullpen puts on every machine it launches.
const (
	TagController = "bullpen:controller" // this controller's id
	TagPool       = "bullpen:pool"
	TagRole       = "bullpen:role"
	TagRunner     = "bullpen:runner"
	TagLaunch     = "bullpen:launch" // the LaunchID of the rows written before the call
	TagSpecHash   = "bullpen:spec-hash"
	TagStatus     = "bullpen:status" // "detached" once picked for a job
)

// Chunk splits ids into slices of at most n.
func Chunk[T any](items []T, n int) [][]T {
	var out [][]T
	for len(items) > 0 {
		k := min(n, len(items))
		out = append(out, items[:k:k])
		items = items[k:]
	}
	return out
}

// Change is guarded transitions of instances and jobs that belong together
// (a job and the instance it is bound to): a store writes all of them or
// none. Requests are applied in order, so a later request on the same row
// sees the earlier one's write.
type Change struct {
	Instances []TransitionRequest
	Jobs      []JobTransitionRequest
}

// Empty reports whether the change holds no transition.
func (c Change) Empty() bool { return len(c.Instances) == 0 && len(c.Jobs) == 0 }

// Changed is what a committed Change wrote, in request order.
type Changed struct {
	Instances []Instance
	Jobs      []Job
}

// ChangeResult is the outcome of one change of a CommitEach: what it wrote,
// or why it was refused (then nothing of it was written).
type ChangeResult struct {
	Changed
	Err error
}
