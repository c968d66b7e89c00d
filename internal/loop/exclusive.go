package loop

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// Leases are what Exclusive needs of the store.
type Leases interface {
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (domain.Lease, bool, error)
	ReleaseLease(ctx context.Context, name, holder string) error
}

// Exclusive runs loops that must act on one replica at a time (the
// converger, the reaper, the terminator): a wrapped loop's step runs only
// while this replica holds the lease named after the loop. The lease is
// taken at each step and renewed while the step runs; a replica that dies
// holds it until it expires, so another takes the loop over within one
// lease period. A step whose lease could not be renewed is cancelled
// rather than left acting beside the new holder.
type Exclusive struct {
	leases Leases
	holder string
	clock  domain.Clock
	log    *slog.Logger

	held    *prometheus.GaugeVec
	changes *prometheus.CounterVec

	mu    sync.Mutex
	holds map[string]bool // by loop, as last seen
}

// NewExclusive returns an Exclusive for this replica (holder names it in
// the leases), with its metrics registered on reg (nil: none).
func NewExclusive(leases Leases, holder string, clk domain.Clock, log *slog.Logger, reg prometheus.Registerer) (*Exclusive, error) {
	if holder == "" {
		return nil, fmt.Errorf("exclusive loops: the replica needs a name")
	}
	e := &Exclusive{leases: leases, holder: holder, clock: clk, log: log, holds: map[string]bool{},
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bullpen_loop_lease_held",
			Help: "1 while this replica holds the lease of a loop that runs on one replica at a time, by loop.",
		}, []string{"loop"}),
		changes: promreg.Counters("bullpen_loop_lease_changes_total",
			"Leases of one-replica loops this replica took (acquired) or gave up or lost (released), by loop.", "loop", "change"),
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if err := promreg.Register(reg, "exclusive loop", e.held, e.changes); err != nil {
		return nil, err
	}
	return e, nil
}

// Wrap returns l running only under its lease, taken for ttl. ttl must
// exceed l.Every, or the lease lapses between steps and moves between
// replicas (still one at a time). The loop's Final runs where the lease is
// held, then gives the lease up so that another replica need not wait for
// it to expire.
func (e *Exclusive) Wrap(l Loop, ttl time.Duration) Loop {
	step, final := l.Step, l.Final
	l.Step = func(ctx context.Context) error {
		sent := e.clock.Now()
		lease, ok, err := e.leases.AcquireLease(ctx, l.Name, e.holder, ttl)
		if err != nil {
			return fmt.Errorf("take the %s lease: %w", l.Name, err)
		}
		e.note(l.Name, ok, lease)
		if !ok {
			return nil
		}
		return e.renewing(ctx, l.Name, ttl, sent, step)
	}
	l.Final = func(ctx context.Context) error {
		if !e.holding(l.Name) {
			return nil
		}
		var err error
		if final != nil {
			err = final(ctx)
		}
		if rerr := e.leases.ReleaseLease(ctx, l.Name, e.holder); rerr != nil {
			e.log.Warn("give up a lease", "lease", l.Name, "err", rerr)
		} else {
			e.note(l.Name, false, domain.Lease{})
		}
		return err
	}
	return l
}

// renewing runs step, renewing the lease every third of ttl. The step is
// cancelled when a renewal is refused, or when the lease's end passes
// without one having succeeded: a renewal still in flight then (a slow
// store) may land too late, and another replica may already hold the
// lease. A lease lasts ttl from when its acquisition was sent.
func (e *Exclusive) renewing(ctx context.Context, name string, ttl time.Duration, sent time.Time, step func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lapse := e.lapse(name, cancel)
	lapse.until(sent.Add(ttl))
	defer lapse.stop()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			// A third of ttl after the last renewal was sent, not after
			// it answered, so that a slow store still renews in time; a
			// timer stopped on the way out, so a short step leaves none
			// behind on the clock.
			tick, stop := clock.Closes(e.clock, sent.Add(ttl/3).Sub(e.clock.Now()))
			select {
			case <-done:
				stop()
				return
			case <-ctx.Done():
				stop()
				return
			case <-tick:
			}
			sent = e.clock.Now()
			lease, ok, err := e.leases.AcquireLease(ctx, name, e.holder, ttl)
			switch {
			case ctx.Err() != nil:
				return // the step ended, or the lease ran out meanwhile
			case err == nil && ok:
				lapse.until(sent.Add(ttl))
				continue
			case err != nil:
				e.log.Warn("renew a lease; retrying while it lasts", "lease", name, "err", err)
				continue
			}
			e.log.Warn("lost a loop's lease during its step; stopping the step", "lease", name, "holder", lease.Holder, "err", err)
			e.note(name, false, lease)
			cancel()
			return
		}
	})
	err := step(ctx)
	close(done)
	wg.Wait()
	return err
}

// lapseTimer cancels a step when its lease's end passes unrenewed.
type lapseTimer struct {
	e      *Exclusive
	name   string
	cancel context.CancelFunc
	mu     sync.Mutex
	timer  domain.Timer
}

func (e *Exclusive) lapse(name string, cancel context.CancelFunc) *lapseTimer {
	return &lapseTimer{e: e, name: name, cancel: cancel}
}

// until sets the lease's end.
func (l *lapseTimer) until(end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = l.e.clock.AfterFunc(end.Sub(l.e.clock.Now()), func() {
		l.e.log.Warn("a loop's lease ran out before a renewal succeeded; stopping the step", "lease", l.name)
		l.e.note(l.name, false, domain.Lease{})
		l.cancel()
	})
}

func (l *lapseTimer) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer.Stop()
}

// note records whether this replica holds name's lease, logging a change.
func (e *Exclusive) note(name string, held bool, lease domain.Lease) {
	e.mu.Lock()
	was, seen := e.holds[name]
	e.holds[name] = held
	e.mu.Unlock()
	v := 0.0
	if held {
		v = 1
	}
	e.held.WithLabelValues(name).Set(v)
	switch {
	case !seen && !held:
		e.log.Info("loop runs on another replica", "lease", name, "holder", lease.Holder, "until", lease.Expires)
	case seen && was == held:
	case held:
		e.changes.WithLabelValues(name, "acquired").Inc()
		e.log.Info("took a loop's lease: it runs here", "lease", name, "replica", e.holder)
	default:
		e.changes.WithLabelValues(name, "released").Inc()
		e.log.Info("a loop's lease is no longer held here", "lease", name, "holder", lease.Holder)
	}
}

// holding reports whether this replica held name's lease when last seen.
func (e *Exclusive) holding(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.holds[name]
}
