package loop_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// replica is one control plane's copy of a one-replica loop, counting the
// steps that ran there.
type replica struct {
	l     loop.Loop
	ran   atomic.Int64
	reg   *prometheus.Registry
	steps func(ctx context.Context) error
}

func newReplica(t *testing.T, leases loop.Leases, name string, clk domain.Clock, ttl time.Duration) *replica {
	t.Helper()
	r := &replica{reg: prometheus.NewRegistry()}
	e, err := loop.NewExclusive(leases, name, clk, quiet, r.reg)
	if err != nil {
		t.Fatal(err)
	}
	r.l = e.Wrap(loop.Loop{Name: "reaper", Every: time.Second, Step: func(ctx context.Context) error {
		r.ran.Add(1)
		if r.steps != nil {
			return r.steps(ctx)
		}
		return nil
	}}, ttl)
	return r
}

func (r *replica) step(t *testing.T) {
	t.Helper()
	if err := r.l.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// held is the replica's bullpen_loop_lease_held gauge for the loop.
func (r *replica) held() float64 {
	families, _ := r.reg.Gather()
	for _, f := range families {
		if f.GetName() == "bullpen_loop_lease_held" && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// One replica at a time runs the loop; a clean stop hands it over at once,
// a dead replica's once its lease has expired.
func TestExclusiveLoopRunsOnOneReplicaAtATime(t *testing.T) {
	clk := clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	st, _ := sqlitetest.Open(t, clk)
	const ttl = 30 * time.Second
	a, b, c := newReplica(t, st, "a", clk, ttl), newReplica(t, st, "b", clk, ttl), newReplica(t, st, "c", clk, ttl)
	for range 3 {
		a.step(t)
		b.step(t)
		c.step(t)
		clk.Advance(time.Second)
	}
	if a.ran.Load() != 3 || b.ran.Load() != 0 || c.ran.Load() != 0 {
		t.Fatalf("steps ran a %d, b %d, c %d times; want a's only", a.ran.Load(), b.ran.Load(), c.ran.Load())
	}
	if err := a.l.Final(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.step(t)
	if b.ran.Load() != 1 {
		t.Fatalf("after a's clean stop b ran %d steps, want 1 at once", b.ran.Load())
	}
	// b dies: c takes over once the lease has expired, not before.
	clk.Advance(ttl - time.Second)
	c.step(t)
	if c.ran.Load() != 0 {
		t.Fatal("c ran while b's lease lasted")
	}
	clk.Advance(time.Second)
	c.step(t)
	if c.ran.Load() != 1 || c.held() != 1 || b.held() != 1 {
		t.Fatalf("c ran %d steps once b's lease expired; lease gauges c %v, b %v (b cannot know)", c.ran.Load(), c.held(), b.held())
	}
	if a.held() != 0 {
		t.Errorf("a gave its lease up but reports %v", a.held())
	}
}

// refusingLeases grants the first acquisition and refuses the rest, as a
// store does once another replica took the lease over.
type refusingLeases struct{ calls atomic.Int64 }

func (l *refusingLeases) AcquireLease(_ context.Context, name, holder string, ttl time.Duration) (domain.Lease, bool, error) {
	if l.calls.Add(1) == 1 {
		return domain.Lease{Name: name, Holder: holder}, true, nil
	}
	return domain.Lease{Name: name, Holder: "other"}, false, nil
}

func (l *refusingLeases) ReleaseLease(context.Context, string, string) error { return nil }

// A step whose lease is lost while it runs is cancelled rather than left
// acting beside the new holder.
func TestExclusiveStepIsCancelledWhenItsLeaseIsLost(t *testing.T) {
	clk := clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	r := newReplica(t, &refusingLeases{}, "a", clk, 30*time.Second)
	started := make(chan struct{})
	r.steps = func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	done := make(chan error, 1)
	go func() { done <- r.l.Step(t.Context()) }()
	<-started
	clk.BlockUntil(2) // the lease's end and the renewal's timer
	clk.Advance(10 * time.Second)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the step ended with %v, want it cancelled", err)
	}
	if r.held() != 0 {
		t.Errorf("the lease gauge says %v after the loss", r.held())
	}
}

// slowLeases grants the first acquisition at once and holds every later
// one until its context ends, as a store too slow to answer in time.
type slowLeases struct {
	calls   atomic.Int64
	waiting chan struct{}
}

func (l *slowLeases) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (domain.Lease, bool, error) {
	if l.calls.Add(1) == 1 {
		return domain.Lease{Name: name, Holder: holder}, true, nil
	}
	close(l.waiting)
	<-ctx.Done()
	return domain.Lease{}, false, ctx.Err()
}

func (l *slowLeases) ReleaseLease(context.Context, string, string) error { return nil }

// A step whose renewal has not answered when the lease ends is cancelled
// at the lease's end: another replica may hold the lease by then.
func TestExclusiveStepEndsWithItsLeaseWhenARenewalIsSlow(t *testing.T) {
	clk := clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	leases := &slowLeases{waiting: make(chan struct{})}
	r := newReplica(t, leases, "a", clk, 30*time.Second)
	r.steps = func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	done := make(chan error, 1)
	go func() { done <- r.l.Step(t.Context()) }()
	clk.BlockUntil(2) // the lease's end and the renewal's timer
	clk.Advance(10 * time.Second)
	<-leases.waiting // the renewal was sent and does not answer
	clk.Advance(19 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("the step ended with %v before its lease did", err)
	default:
	}
	clk.Advance(time.Second)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the step ended with %v, want it cancelled at the lease's end", err)
	}
	if r.held() != 0 {
		t.Errorf("the lease gauge says %v after the lease ran out", r.held())
	}
}
