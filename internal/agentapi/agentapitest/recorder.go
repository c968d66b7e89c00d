package agentapitest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Call is one AgentAPI call, as it returned.
type Call struct {
	Op          string // "signal", "heartbeat" or "next"
	CloudID     string
	Signal      domain.Signal
	Instruction domain.Instruction
	Err         error
}

// Recorder is a domain.AgentAPI that passes every call on and records it.
// It passes on the calls on a reading the agent API made too (NextFor,
// SignalFor), so the tests take the server's own path.
type Recorder struct {
	api     agentapi.ReadingAPI
	mu      sync.Mutex
	calls   []Call
	changed chan struct{} // closed and replaced at every call
}

var _ agentapi.ReadingAPI = (*Recorder)(nil)

func (r *Recorder) record(c Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Recorder) Signal(ctx context.Context, s domain.Signal) error {
	err := r.api.Signal(ctx, s)
	r.record(Call{Op: "signal", CloudID: s.CloudID, Signal: s, Err: err})
	return err
}

func (r *Recorder) SignalFor(ctx context.Context, in domain.Instance, s domain.Signal) error {
	err := r.api.SignalFor(ctx, in, s)
	r.record(Call{Op: "signal", CloudID: s.CloudID, Signal: s, Err: err})
	return err
}

func (r *Recorder) NextFor(ctx context.Context, in domain.Instance) (domain.Instruction, error) {
	ins, err := r.api.NextFor(ctx, in)
	r.record(Call{Op: "next", CloudID: in.CloudID, Instruction: ins, Err: err})
	return ins, err
}

func (r *Recorder) Heartbeat(ctx context.Context, cloudID string) error {
	err := r.api.Heartbeat(ctx, cloudID)
	r.record(Call{Op: "heartbeat", CloudID: cloudID, Err: err})
	return err
}

func (r *Recorder) Next(ctx context.Context, cloudID string) (domain.Instruction, error) {
	ins, err := r.api.Next(ctx, cloudID)
	r.record(Call{Op: "next", CloudID: cloudID, Instruction: ins, Err: err})
	return ins, err
}

// Count returns how many calls so far match.
func (r *Recorder) Count(match func(Call) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if match(c) {
			n++
		}
	}
	return n
}

// Await waits until n calls match and returns the nth. It fails the test
// after a generous real-time limit, which only a broken test reaches.
func (r *Recorder) Await(t testing.TB, n int, match func(Call) bool) Call {
	t.Helper()
	limit := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		seen := 0
		for _, c := range r.calls {
			if match(c) {
				if seen++; seen == n {
					r.mu.Unlock()
					return c
				}
			}
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-limit:
			t.Fatalf("gave up waiting for call #%d; calls so far: %+v", n, r.Calls())
		}
	}
}

// Calls returns every call so far.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// IsSignal matches the signals of kind k (from any instance).
func IsSignal(k domain.SignalKind) func(Call) bool {
	return func(c Call) bool { return c.Op == "signal" && c.Signal.Kind == k }
}

// IsOp matches the calls of one operation.
func IsOp(op string) func(Call) bool {
	return func(c Call) bool { return c.Op == op }
}
