package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
)

// reachability tracks how long the control plane has been unreachable:
// since the first failure of the current streak, heartbeats included.
type reachability struct {
	mu    sync.Mutex
	since time.Time // zero while reachable
}

func (r *reachability) ok() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.since = time.Time{}
}

// fail notes a failure at now and returns when the streak began.
func (r *reachability) fail(now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.since.IsZero() {
		r.since = now
	}
	return r.since
}

// retry calls call until it succeeds or fails for good, waiting with
// exponential backoff (with jitter, honouring Retry-After) while the
// failure is transient. Once the control plane has been unreachable for
// the deadline it gives up with ErrUnreachable, unless a runner is running:
// a job in progress does not need the control plane.
func (a *Agent) retry(ctx context.Context, what string, call func(context.Context) error) error {
	backoff := a.cfg.BackoffMin
	for {
		err := call(ctx)
		if err == nil {
			a.reach.ok()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !transient(err) {
			return err
		}
		now := a.clk.Now()
		giveUpAt := a.reach.fail(now).Add(a.cfg.UnreachableDeadline)
		if !a.busy.Load() && !now.Before(giveUpAt) {
			return fmt.Errorf("%s: %w since %s: %w", what, ErrUnreachable, giveUpAt.Add(-a.cfg.UnreachableDeadline).Format(time.RFC3339), err)
		}
		delay := a.jitter(backoff)
		var ae *APIError
		if errors.As(err, &ae) && ae.RetryAfter > delay {
			delay = min(ae.RetryAfter, a.cfg.BackoffMax)
		}
		if left := giveUpAt.Sub(now); !a.busy.Load() && delay > left {
			delay = left // one last try at the deadline
		}
		a.log.Warn("control plane call failed; retrying", "call", what, "in", delay, "err", err)
		if err := a.sleep(ctx, delay); err != nil {
			return err
		}
		backoff = min(2*backoff, a.cfg.BackoffMax)
	}
}

// sleep waits d on the agent's clock, or until ctx ends. It leaves no
// timer behind either way.
func (a *Agent) sleep(ctx context.Context, d time.Duration) error {
	done, stop := clock.Closes(a.clk, d)
	defer stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
