package domain

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// InstanceFilter selects instances; zero fields do not constrain.
type InstanceFilter struct {
	// TokenHash selects the instance holding that agent token.
	TokenHash string
	Pool      string
	Runner    string
	Job       string
	CloudID   string
	States    []State
	// ExpiredAt selects the instances past their deadline at that time
	// (Instance.Expired), so that the reaper reads only those rather than
	// every live row.
	ExpiredAt time.Time
	// Limit caps the result (0 = no cap), so that a page of a listing
	// reads that page rather than every row kept; the newest instances
	// come first when Newest is set, else the oldest.
	Limit  int
	Newest bool
	// After, when set, keeps the instances that come after it in that
	// order (see ListPosition.Passed): the page that follows a page ending
	// there.
	After *ListPosition[string]
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

// Instances are the instance rows. Every implementation runs the contract
// suite in internal/store/storetest.
type Instances interface {
	// CreateInstances inserts rows all-or-nothing; ErrExists if an id is taken.
	// The store stamps Version 1 and CreatedAt, UpdatedAt and StateSince from
	// its clock, whatever the caller set.
	CreateInstances(ctx context.Context, insts []Instance) error
	// GetInstance returns ErrNotFound for an unknown id.
	GetInstance(ctx context.Context, id string) (Instance, error)
	// ListInstances returns matching rows ordered by CreatedAt, then ID,
	// or the reverse when f.Newest is set, at most f.Limit of them, those
	// past f.After only when it is set.
	ListInstances(ctx context.Context, f InstanceFilter) ([]Instance, error)
	// Transition is the only way an instance changes: if the row matches g,
	// fn edits a copy, the state machine is checked (see ApplyTransition)
	// and the row is written with Version+1, atomically. It returns
	// ErrNotFound, a *ConflictError (errors.Is ErrConflict) or a
	// *TransitionError. Callers pass a Lifecycle verb's request.
	Transition(ctx context.Context, id string, g Guard, fn func(*Instance)) (Instance, error)
	// TransitionBatch applies independent transitions, each with the
	// semantics of Transition, as efficiently as the backend allows. The
	// error is for the batch as a whole (a closed store); per-request
	// outcomes are in the results, in request order.
	TransitionBatch(ctx context.Context, reqs []TransitionRequest) ([]TransitionResult, error)
	// DeleteInstances removes terminated rows, ignoring unknown ids; if any row
	// is in another state nothing is deleted and the error names them.
	DeleteInstances(ctx context.Context, ids []string) error
}

// Heartbeats record that instances' agents are alive.
type Heartbeats interface {
	// RecordHeartbeat notes that the instance's agent was alive at at. It
	// is not a transition: no guard, no version change. It keeps the latest:
	// an older at is ignored.
	RecordHeartbeat(ctx context.Context, id string, at time.Time) error
	// RecordHeartbeats records many heartbeats at once, with the same
	// rules; ids with no row are ignored (the instance may be gone).
	RecordHeartbeats(ctx context.Context, beats []Heartbeat) error
}

// Jobs are the job rows.
type Jobs interface {
	// CreateJobs inserts jobs whose id is new and leaves existing ones
	// untouched: created[i] reports which. The store stamps Version 1,
	// CreatedAt and UpdatedAt. On error, created is nil (nothing was
	// written) or reports the jobs created before the failure (a store
	// that writes job by job).
	CreateJobs(ctx context.Context, jobs []Job) (created []bool, err error)
	// GetJob returns ErrNotFound for an unknown id.
	GetJob(ctx context.Context, id int64) (Job, error)
	// ListJobs returns matching jobs ordered by CreatedAt, then ID, or
	// the reverse when f.Newest is set, at most f.Limit of them, those
	// past f.After only when it is set.
	ListJobs(ctx context.Context, f JobFilter) ([]Job, error)
	// TransitionJob changes a job the way Transition changes an instance,
	// deciding with ApplyJobTransition.
	TransitionJob(ctx context.Context, id int64, g JobGuard, fn func(*Job)) (Job, error)
	TransitionJobs(ctx context.Context, reqs []JobTransitionRequest) ([]JobTransitionResult, error)
	// DeleteJobs removes final jobs (completed, rejected) last changed
	// before the instant, and reports how many.
	DeleteJobs(ctx context.Context, before time.Time) (int, error)
}

// Changes apply transitions of instances and jobs that belong together
// (a job and the instance bound to it) atomically.
type Changes interface {
	// Commit applies every transition of c in one atomic step: if any is
	// refused (ErrNotFound, a conflict, an illegal transition) nothing is
	// written and the error is that refusal, which names the row.
	Commit(ctx context.Context, c Change) (Changed, error)
	// CommitEach applies each change as Commit does, independently of
	// the others, as efficiently as the backend allows. The error is for
	// the batch as a whole; per-change outcomes are in the results, in
	// order.
	CommitEach(ctx context.Context, cs []Change) ([]ChangeResult, error)
}

// PoolStatuses keep what the converger last saw of each pool.
type PoolStatuses interface {
	PutPoolStatus(ctx context.Context, s PoolStatus) error
	ListPoolStatus(ctx context.Context) ([]PoolStatus, error)
}

// Leases let a loop run on one replica at a time.
type Leases interface {
	// AcquireLease takes or renews name for holder until now+ttl; it reports
	// false (and the current lease) when another holder has it unexpired. A
	// lease is expired from its Expires instant on.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, bool, error)
	// ReleaseLease gives the lease up if holder has it.
	ReleaseLease(ctx context.Context, name, holder string) error
}

// Configurations keep the configuration file last put in force from each
// source, so that a replica starting while its source cannot be read, or
// holds a file that does not validate, serves what the others serve
// rather than nothing.
type Configurations interface {
	// PutConfiguration replaces what is kept for c.Source. Data over
	// MaxConfigurationBytes is refused.
	PutConfiguration(ctx context.Context, c ConfigRecord) error
	// GetConfiguration returns what is kept for source; found is false
	// when nothing is.
	GetConfiguration(ctx context.Context, source string) (c ConfigRecord, found bool, err error)
}

// ConfigRecord is a configuration file as it was put in force.
type ConfigRecord struct {
	Source string // where it was read, as the source names itself
	Data   []byte
	At     time.Time // when it was put in force
}

// MaxConfigurationBytes is the largest configuration file a store keeps:
// well under the item size of the stores that have one (DynamoDB's
// 400 KB), and far over any real runs-on.yml.
const MaxConfigurationBytes = 256 << 10

// Check refuses a record a store should not keep.
func (c ConfigRecord) Check() error {
	switch {
	case c.Source == "":
		return errors.New("no source")
	case len(c.Data) == 0:
		return errors.New("no data")
	case c.At.IsZero():
		return errors.New("no time it was put in force")
	case len(c.Data) > MaxConfigurationBytes:
		return fmt.Errorf("%d bytes, over the %d a store keeps", len(c.Data), MaxConfigurationBytes)
	}
	return nil
}

// Interruptions keep the spot interruptions heard of lately, so that the
// spot circuit breaker of every replica counts those any replica heard,
// and one that restarts forgets none of them.
type Interruptions interface {
	// RecordInterruption keeps i until i.Expires. An ID kept already
	// changes nothing, so a write whose answer was lost may be made again.
	RecordInterruption(ctx context.Context, i Interruption) error
	// ListInterruptions returns those at or after since that have not
	// expired, oldest first (by At, then ID).
	ListInterruptions(ctx context.Context, since time.Time) ([]Interruption, error)
}

// Interruption is a spot machine the cloud took back.
type Interruption struct {
	ID     string // the recorder's, unique
	Runner string // the machine's runner class
	At     time.Time
	// Expires is when it stops mattering: it is listed before, and a
	// store may forget it from then on.
	Expires time.Time
}

// Check refuses an interruption a store should not keep.
func (i Interruption) Check() error {
	switch {
	case i.ID == "":
		return errors.New("no id")
	case i.Runner == "":
		return errors.New("no runner class")
	case i.At.IsZero():
		return errors.New("no time")
	case !i.Expires.After(i.At):
		return fmt.Errorf("expires at %v, not after its time %v", i.Expires, i.At)
	}
	return errors.Join(CheckTime("interruption time", i.At), CheckTime("interruption expiry", i.Expires))
}

// Store is every port of the state together: what a backend implements.
// Consumers declare the few methods they use.
type Store interface {
	Instances
	Heartbeats
	Jobs
	Changes
	PoolStatuses
	Leases
	Configurations
	Interruptions
	Close() error
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
