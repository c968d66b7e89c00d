package loop_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/loop"
)

var t0 = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

func newRunner(t *testing.T) (*loop.Runner, *clock.Virtual, *prometheus.Registry) {
	t.Helper()
	clk := clock.NewVirtual(t0)
	reg := prometheus.NewRegistry()
	r, err := loop.NewRunner(clk, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	return r, clk, reg
}

// A step that keeps failing is retried with a growing backoff, counted,
// and makes its loop unhealthy; one success makes it healthy again.
func TestAFailingLoopBacksOffAndIsReported(t *testing.T) {
	r, clk, _ := newRunner(t)
	var calls atomic.Int32
	fail := atomic.Bool{}
	fail.Store(true)
	steps := make(chan struct{}, 16)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		done <- r.Run(ctx, loop.Loop{Name: "flaky", Every: time.Minute, Step: func(context.Context) error {
			calls.Add(1)
			defer func() { steps <- struct{}{} }()
			if fail.Load() {
				return errors.New("store unreachable")
			}
			return nil
		}})
	}()
	// Failures 1 and 2 wait 1 s and 2 s; from the third, which makes the
	// loop unhealthy, the backoff (4 s, 8 s, …) is at least the loop's
	// minute.
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, time.Minute} {
		<-steps
		clk.BlockUntil(1)
		if got := r.Statuses()[0].Failures; got != i+1 {
			t.Fatalf("after failure %d: %d in a row", i+1, got)
		}
		clk.Advance(wait)
	}
	<-steps
	clk.BlockUntil(1)
	if r.Healthy() {
		t.Fatal("a loop failing 4 times in a row is reported healthy")
	}
	if next, _ := clk.Next(); !next.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("after the fourth failure the step is tried again at %v, want a minute on, at %v", next, clk.Now().Add(time.Minute))
	}
	fail.Store(false)
	clk.Advance(time.Minute)
	<-steps
	clk.BlockUntil(1)
	if !r.Healthy() || r.Statuses()[0].Failures != 0 {
		t.Fatalf("after a success: %+v", r.Statuses())
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A panicking step stops its loop, not the others, and Run reports it.
func TestAPanicStopsOneLoopAndIsReturned(t *testing.T) {
	r, _, reg := newRunner(t)
	ctx, stop := context.WithCancel(t.Context())
	finals := make(chan string, 2)
	panicking := make(chan struct{})
	go func() {
		// Once the healthy loop stepped and the broken one panicked, the
		// test ends the run.
		<-finals
		<-panicking
		stop()
	}()
	err := r.Run(ctx,
		loop.Loop{Name: "broken", Step: func(context.Context) error { close(panicking); panic("nil map") }},
		loop.Loop{Name: "fine", Every: time.Hour, Step: func(context.Context) error {
			finals <- "fine"
			<-ctx.Done()
			return nil
		}, Final: func(context.Context) error { return nil }},
	)
	if err == nil {
		t.Fatal("a panicking loop was not reported")
	}
	if n := testutil.CollectAndCount(reg, "bullpen_loop_consecutive_failures"); n != 2 {
		t.Fatalf("%d loops in the failures gauge, want 2", n)
	}
}

// A step's own duration is not added to its loop's interval: steps start
// Every apart, as an autoscaler counting cycles as polls expects.
func TestStepsStartEveryApartHoweverLongTheyTake(t *testing.T) {
	r, clk, _ := newRunner(t)
	started := make(chan time.Time, 1)
	release := make(chan struct{})
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		done <- r.Run(ctx, loop.Loop{Name: "slow", Every: time.Minute, Step: func(context.Context) error {
			started <- clk.Now()
			<-release
			return nil
		}})
	}()
	first := <-started
	clk.Advance(10 * time.Second) // the step takes ten seconds
	release <- struct{}{}
	clk.BlockUntil(1)
	if next, ok := clk.Next(); !ok || !next.Equal(first.Add(time.Minute)) {
		t.Errorf("next step at %v (%v), want a minute after the first started, %v", next, ok, first.Add(time.Minute))
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A loop's MinRetry holds back the retries of a failed step.
func TestAFailedStepWaitsAtLeastItsMinRetry(t *testing.T) {
	r, clk, _ := newRunner(t)
	failed := make(chan struct{}, 1)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		done <- r.Run(ctx, loop.Loop{Name: "sweep", Every: 30 * time.Second, MinRetry: 30 * time.Second, Step: func(context.Context) error {
			failed <- struct{}{}
			return errors.New("throttled")
		}})
	}()
	<-failed
	clk.BlockUntil(1)
	if next, _ := clk.Next(); !next.Equal(clk.Now().Add(30 * time.Second)) {
		t.Errorf("after the first failure the step is tried again at %v, want 30 s on, at %v", next, clk.Now().Add(30*time.Second))
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
