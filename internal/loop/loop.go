// Package loop runs the control plane's loops the one same way: a loop is
// a step repeated until its context ends; a step that fails is logged,
// counted and retried after a backoff that grows while it keeps failing;
// and a loop that keeps failing is reported unhealthy (a metric, and the
// health endpoint) instead of failing silently.
package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// Loop is one of the control plane's loops.
type Loop struct {
	Name string
	// Every is how far apart steps that succeed start: a step that took
	// longer starts the next at once. Zero steps again at once: such a
	// step waits inside (a long poll of its queue). A failed step is
	// followed by the runner's backoff instead.
	Every time.Duration
	// MinRetry is the least wait after a failed step: a loop whose step
	// is a whole sweep (every pool's cloud calls) is not retried within
	// seconds, which would call a throttled API twice more and count a
	// blip of a few seconds as three failures in a row.
	MinRetry time.Duration
	Step     func(ctx context.Context) error
	// Final, when set, runs once after ctx ends, with a context that is
	// not cancelled (a last flush of what is in hand).
	Final func(ctx context.Context) error
}

// Status is how a loop is doing.
type Status struct {
	Name        string    `json:"name"`
	Failures    int       `json:"consecutive_failures"`
	LastError   string    `json:"last_error,omitempty"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	Healthy     bool      `json:"healthy"`
}

// Defaults of a Runner.
const (
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = time.Minute
	// DefaultUnhealthyAfter failures in a row make a loop unhealthy.
	DefaultUnhealthyAfter = 3
)

// Runner runs loops and keeps their status.
type Runner struct {
	clock          domain.Clock
	log            *slog.Logger
	backoff, max   time.Duration
	unhealthyAfter int
	failures       *prometheus.CounterVec
	failing        *prometheus.GaugeVec

	mu     sync.Mutex
	status map[string]*Status
}

// NewRunner returns a runner whose metrics are registered with reg (nil:
// none).
func NewRunner(clk domain.Clock, log *slog.Logger, reg prometheus.Registerer) (*Runner, error) {
	r := &Runner{clock: clk, log: log, backoff: DefaultBackoff, max: DefaultMaxBackoff,
		unhealthyAfter: DefaultUnhealthyAfter, status: map[string]*Status{},
		failures: promreg.Counters("bullpen_loop_failures_total",
			"Steps of a control-plane loop that failed, by loop.", "loop"),
		failing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bullpen_loop_consecutive_failures",
			Help: "Steps of a loop that failed in a row; 0 once one succeeds.",
		}, []string{"loop"}),
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if err := promreg.Register(reg, "loop", r.failures, r.failing); err != nil {
		return nil, err
	}
	return r, nil
}

// Run runs every loop in its own goroutine until ctx ends, then waits for
// each to return and runs its Final. It returns what the loops could not
// carry out: a step that panicked (the loop stops; the others go on) or a
// Final that failed.
func (r *Runner) Run(ctx context.Context, loops ...Loop) error {
	var wg sync.WaitGroup
	errs := make([]error, len(loops))
	for i, l := range loops {
		r.track(l.Name)
		wg.Go(func() { errs[i] = r.run(ctx, l) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *Runner) run(ctx context.Context, l Loop) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("loop stopped by a panic", "loop", l.Name, "panic", p, "stack", string(debug.Stack()))
			r.note(l.Name, fmt.Errorf("panic: %v", p))
			err = fmt.Errorf("loop %s: panic: %v", l.Name, p)
		}
	}()
	for ctx.Err() == nil {
		started := r.clock.Now()
		stepErr := l.Step(ctx)
		if ctx.Err() != nil {
			break
		}
		// Steps start Every apart, however long each took, so that what
		// counts cycles (an autoscaler's polls) sees the interval it was
		// configured for, not the interval plus the step's duration.
		wait := l.Every - r.clock.Now().Sub(started)
		if stepErr != nil {
			n := r.note(l.Name, stepErr)
			r.failures.WithLabelValues(l.Name).Inc()
			level := slog.LevelWarn
			if n == r.unhealthyAfter {
				level = slog.LevelError // it keeps failing: a human should look
			}
			r.log.Log(ctx, level, "loop step failed", "loop", l.Name, "failures_in_a_row", n, "err", stepErr)
			wait = max(r.backoffAfter(n), l.MinRetry)
			if n >= r.unhealthyAfter {
				// A step that keeps failing is not tried more often than it
				// runs when it succeeds: a sweep of every repository every
				// five minutes does not become one a minute in an outage.
				wait = max(wait, l.Every)
			}
		} else {
			r.note(l.Name, nil)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
			case <-r.clock.After(wait):
			}
		}
	}
	if l.Final != nil {
		if err := l.Final(context.WithoutCancel(ctx)); err != nil {
			return fmt.Errorf("loop %s: %w", l.Name, err)
		}
	}
	return nil
}

// backoffAfter is the wait after the nth failure in a row: doubling from
// the backoff up to the maximum.
func (r *Runner) backoffAfter(n int) time.Duration {
	return domain.Doubling(r.backoff, r.max, n)
}

func (r *Runner) track(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.status[name]; !ok {
		r.status[name] = &Status{Name: name, Healthy: true}
	}
	r.failing.WithLabelValues(name).Set(0)
}

// note records a step's outcome and returns the failures in a row.
func (r *Runner) note(name string, err error) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.status[name]
	if err == nil {
		s.Failures, s.LastSuccess, s.Healthy = 0, r.clock.Now(), true
	} else {
		s.Failures++
		s.LastError = err.Error()
		s.Healthy = s.Failures < r.unhealthyAfter
	}
	r.failing.WithLabelValues(name).Set(float64(s.Failures))
	return s.Failures
}

// Statuses reports every loop's status, by name.
func (r *Runner) Statuses() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, 0, len(r.status))
	for _, s := range r.status {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Healthy reports whether no loop keeps failing.
func (r *Runner) Healthy() bool {
	for _, s := range r.Statuses() {
		if !s.Healthy {
			return false
		}
	}
	return true
}
