package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
)

// reachability tracks how long the control plane has been unreachable:
// since the first failure of the current streak, heartbeats included. The
// streak's start is kept in the state directory while it lasts, so that an
// agent restarted during an outage (a crash, systemd restarting it after
// an error) goes on counting from it rather than from its own start: the
// deadline is what keeps an abandoned machine from being billed forever.
type reachability struct {
	mu       sync.Mutex
	since    time.Time // zero while reachable
	failures uint64    // failures noted so far
	// back is closed when a call sent after failure backFrom (the first
	// since the last close that got no answer from the control plane) is
	// answered: every call waiting out a backoff since is tried again at
	// once, rather than after the rest of a delay that grew while the
	// control plane was away. A call sent before the failure proves
	// nothing of the control plane after it.
	back     chan struct{}
	backFrom uint64
	file     string // where the streak's start is kept; "" keeps it in memory only
	boot     string // the boot the streak is counted in
	log      *slog.Logger
}

// keepIn keeps the streak in dir from now on, and resumes the streak an
// earlier run of the agent left there in the same boot (a machine started
// again begins afresh: its network may take a while to come up). It returns
// the resumed streak's start, zero if none. Called before any call is made.
func (r *reachability) keepIn(dir, boot string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.file, r.boot = filepath.Join(dir, unreachableFile), boot
	s, ok, err := loadStreak(r.file)
	switch {
	case err != nil:
		r.log.Warn("the unreachable streak of an earlier run is unreadable; counting afresh", "err", err)
	case ok && boot != "" && s.BootID == boot:
		r.since = s.Since
		return r.since
	}
	r.forget()
	return time.Time{}
}

// mark is what a call takes before it is sent, for ok.
func (r *reachability) mark() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures
}

// ok notes a call answered, sent at mark: the streak, if any, is over.
func (r *reachability) ok(mark uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.back != nil && mark >= r.backFrom {
		close(r.back)
		r.back = nil
	}
	if !r.since.IsZero() {
		r.since = time.Time{}
		r.forget()
	}
}

// fail notes a failure at now and returns when the streak began, and a
// channel closed once a call sent after it is answered. A failure the
// control plane answered itself (answered: a 503 while its store is
// throttled) gets a nil channel: it was reachable all along, so another
// call answered says nothing new, and cutting the backoff short would
// retry the failing call at every heartbeat.
func (r *reachability) fail(now time.Time, answered bool) (time.Time, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures++
	var back chan struct{}
	if !answered {
		if r.back == nil {
			r.back, r.backFrom = make(chan struct{}), r.failures
		}
		back = r.back
	}
	if r.since.IsZero() {
		r.since = now
		if r.file != "" {
			if err := saveStreak(r.file, streak{Since: now, BootID: r.boot}); err != nil {
				r.log.Warn("the unreachable streak's start is not kept: a restarted agent would count afresh", "err", err)
			}
		}
	}
	return r.since, back
}

// forget removes the kept streak.
func (r *reachability) forget() {
	if r.file == "" {
		return
	}
	if err := os.Remove(r.file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Warn("the ended unreachable streak could not be removed", "err", err)
	}
}

// retry calls call until it succeeds or fails for good, waiting with
// exponential backoff (with jitter, honouring Retry-After) while the
// failure is transient. When the failure got no answer from the control
// plane (the network, a timeout, a proxy's page), any call of the agent
// sent after it and answered (a heartbeat, most often) cuts the wait
// short, though never before a Retry-After it carried: the control plane
// is back, and a long poll left in a 30 s backoff would miss instructions
// it waits for. A failure the control plane answered itself (503, 429) is
// waited out in full. Once the control plane has been unreachable for the
// deadline it gives up with ErrUnreachable, unless a job is running: a job
// in progress does not need the control plane.
func (a *Agent) retry(ctx context.Context, what string, call func(context.Context) error) error {
	backoff := a.cfg.BackoffMin
	for {
		mark := a.reach.mark()
		err := call(ctx)
		if err == nil {
			a.reach.ok(mark)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !transient(err) {
			return err
		}
		now := a.clk.Now()
		since, back := a.reach.fail(now, answeredByControlPlane(err))
		giveUpAt := since.Add(a.cfg.UnreachableDeadline)
		if a.givingUp(now, since) {
			return unreachable(what, since, err)
		}
		delay, floor := a.jitter(backoff), time.Duration(0)
		var ae *APIError
		if errors.As(err, &ae) && ae.RetryAfter > 0 {
			floor = min(ae.RetryAfter, a.cfg.BackoffMax)
			delay = max(delay, floor)
		}
		if left := giveUpAt.Sub(now); !a.jobRunning.Load() && delay > left {
			delay = left // one last try at the deadline
		}
		floor = min(floor, delay)
		a.log.Warn("control plane call failed; retrying", "call", what, "in", delay, "err", err)
		if err := a.backoff(ctx, delay, floor, back); err != nil {
			return err
		}
		backoff = min(2*backoff, a.cfg.BackoffMax)
	}
}

// backoff waits delay, or until back is closed once floor has passed, or
// until ctx ends.
func (a *Agent) backoff(ctx context.Context, delay, floor time.Duration, back <-chan struct{}) error {
	if floor > 0 {
		if err := a.sleep(ctx, floor); err != nil {
			return err
		}
		delay -= floor
	}
	if delay <= 0 {
		return nil
	}
	done, stop := clock.Closes(a.clk, delay)
	defer stop()
	select {
	case <-done:
	case <-back:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// givingUp reports whether the control plane, unreachable since since, has
// been so past the deadline at now, with no job running to wait for. A
// runner that has not started its job (it waits for one that was cancelled
// or taken by another runner) is no reason to stay.
func (a *Agent) givingUp(now, since time.Time) bool {
	return !a.jobRunning.Load() && !now.Before(since.Add(a.cfg.UnreachableDeadline))
}

func unreachable(what string, since time.Time, err error) error {
	return fmt.Errorf("%s: %w since %s: %w", what, ErrUnreachable, since.Format(time.RFC3339), err)
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
