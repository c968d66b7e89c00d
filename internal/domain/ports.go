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

// Cloud is the compute provider. Batch calls (Start, Stop, Terminate, Tag)
// take at most MaxBatch ids; the caller splits larger sets. A batch with ids
// the cloud does not know acts on the others and returns an
// *UnknownInstancesError naming the unknown ones. NotActedOn reads which
// ids a batch call's error leaves as they were.
type Cloud interface {
	// Create launches machines like an instant fleet. On partial fulfilment
	// it returns the machines it did create together with an error that
	// wraps ErrInsufficientCapacity; the caller decides their fate.
	Create(ctx context.Context, spec LaunchSpec) ([]CloudInstance, error)
	// Start, Stop and Terminate change the state of machines. A machine
	// the call cannot change (still stopping for a start, protected from
	// termination) does not fail the others: the call acts on every other
	// id and returns a *RefusedInstancesError naming the refused ids (and
	// any unknown ones). A machine terminated or shutting down that the
	// call cannot change is reported as unknown: it is gone.
	Start(ctx context.Context, ids []string) error
	Stop(ctx context.Context, ids []string) error
	Terminate(ctx context.Context, ids []string) error
	Tag(ctx context.Context, ids []string, tags map[string]string) error
	List(ctx context.Context, f CloudFilter) ([]CloudInstance, error)
	// ResolveImage turns an image name from the configuration into the
	// provider's image id (an AMI id on EC2) for runner r: where a name
	// matches images of several architectures, the newest that r's
	// instance types can boot.
	ResolveImage(ctx context.Context, name string, r RunnerSpec) (string, error)
}

// MaxBatch is the most ids bullpen sends in one start, stop, terminate or
// tag call (terminations in groups of 50).
const MaxBatch = 50

// Cloud errors, wrapped by *CloudError.
var (
	ErrInsufficientCapacity = errors.New("insufficient capacity")
	ErrThrottled            = errors.New("request throttled")
	ErrUnknownInstance      = errors.New("unknown instance")
	ErrUnknownImage         = errors.New("unknown image")
	ErrInvalidRequest       = errors.New("invalid request")
	// ErrUnauthorized: the provider refuses the caller's credentials or
	// permissions (an IAM policy that lacks an action, say).
	ErrUnauthorized = errors.New("not authorized")
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
