package sim

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Operation names: keys of Calls and FailNext. The first six are the
// domain.GitHub methods; OpRunJIT is the runner process connecting.
const (
	OpRegisterRunner = "RegisterRunner"
	OpListRunners    = "ListRunners"
	OpDeleteRunner   = "DeleteRunner"
	OpQueuedJobs     = "QueuedJobs"
	OpGetJob         = "GetJob"
	OpCancelRun      = "CancelRun"
	OpRerunJob       = "RerunJob"
	OpRunJIT         = "RunJIT"
)

// ErrInjected is what FailNext injects when given no error.
var ErrInjected = errors.New("injected failure")

// RateLimitError is a call refused under the rate limit, with the time the
// limit resets (GitHub's x-ratelimit-reset). It wraps domain.ErrRateLimited.
type RateLimitError struct {
	Reset time.Time
}

func (e *RateLimitError) Error() string {
	return "API rate limit exceeded until " + e.Reset.UTC().Format(time.RFC3339)
}

func (e *RateLimitError) Unwrap() error { return domain.ErrRateLimited }

// RetryAt is when the limit lifts (domain.RetryAt).
func (e *RateLimitError) RetryAt() time.Time { return e.Reset }

// faults is the injected trouble and the counters, guarded by GitHub.mu.
type faults struct {
	calls      map[string]int
	failures   map[string]*failure
	rateReset  time.Time
	dropNext   int
	delivered  int
	dropped    int
	deliveries uint64 // delivery ids handed out
}

type failure struct {
	n   int
	err error
}

func newFaults() faults {
	return faults{calls: map[string]int{}, failures: map[string]*failure{}}
}

// FailNext makes the next n calls of op fail with err (ErrInjected when
// nil). n <= 0 clears the injection.
func (g *GitHub) FailNext(op string, n int, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n <= 0 {
		delete(g.failures, op)
		return
	}
	if err == nil {
		err = ErrInjected
	}
	g.failures[op] = &failure{n: n, err: err}
}

// RateLimit refuses every API call (not RunJIT) with a *RateLimitError
// until the clock reaches reset.
func (g *GitHub) RateLimit(reset time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rateReset = reset
}

// DropDeliveries makes the next n webhooks go missing, as deliveries do:
// the jobs still exist and QueuedJobs lists them.
func (g *GitHub) DropDeliveries(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropNext = max(n, 0)
}

// Calls returns how many calls each operation has had, failed ones
// included (a call with an ended context is not made, so not counted).
func (g *GitHub) Calls() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.calls)
}

// DeliveryStats counts webhooks.
type DeliveryStats struct {
	Sent    int // handed to Options.Deliver (or would have been, when nil)
	Dropped int // lost on purpose (DropDeliveries)
}

// Deliveries returns the webhook counters.
func (g *GitHub) Deliveries() DeliveryStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return DeliveryStats{Sent: g.delivered, Dropped: g.dropped}
}

// call does what every call does before its own work: honour the context,
// count the call, apply the rate limit and injected failures. Called under
// g.mu.
func (g *GitHub) call(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.calls[op]++
	if op != OpRunJIT {
		if now := g.clk.Now(); now.Before(g.rateReset) {
			return &RateLimitError{Reset: g.rateReset}
		}
	}
	if f := g.failures[op]; f != nil {
		if f.n--; f.n <= 0 {
			delete(g.failures, op)
		}
		return f.err
	}
	return nil
}
