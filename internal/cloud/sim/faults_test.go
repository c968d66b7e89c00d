package sim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/cloudtest"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestPartialFulfilment(t *testing.T) {
	c, clk := newSim(t, sim.Options{Capacity: 3, Latency: sim.Latency{Terminate: time.Minute}})
	ctx := t.Context()
	spec := domain.LaunchSpec{ImageID: "ami-1", Count: 2}
	first := create(t, c, 2, nil)

	got, err := c.Create(ctx, spec)
	cloudtest.WantCode(t, err, domain.ErrInsufficientCapacity, sim.CodeInsufficient)
	if len(got) != 1 {
		t.Fatalf("partial fulfilment returned %d machines, want 1", len(got))
	}
	got, err = c.Create(ctx, spec)
	cloudtest.WantCode(t, err, domain.ErrInsufficientCapacity, sim.CodeInsufficient)
	if got != nil {
		t.Fatalf("a full cloud returned machines %v", got)
	}

	// Shutting-down machines hold their capacity until terminated.
	if err := c.Terminate(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, spec); !errors.Is(err, domain.ErrInsufficientCapacity) {
		t.Fatalf("created while machines were shutting down: %v", err)
	}
	clk.Advance(time.Minute)
	if got, err := c.Create(ctx, spec); err != nil || len(got) != 2 {
		t.Fatalf("after termination: %d machines, %v", len(got), err)
	}

	c.SetCapacity(0)
	create(t, c, 10, nil)
	if n := len(c.Instances()); n != 15 {
		t.Fatalf("%d machines, want 15", n)
	}
}

func TestThrottlingRecoversAsTheClockAdvances(t *testing.T) {
	c, clk := newSim(t, sim.Options{})
	ctx := t.Context()
	c.Throttle(sim.OpDescribeInstances, 2, 3)
	list := func() error {
		_, err := c.List(ctx, domain.CloudFilter{})
		return err
	}
	steps := []struct {
		advance time.Duration
		ok      int // calls that succeed before one is throttled
	}{
		{0, 3},                      // the bucket starts full
		{500 * time.Millisecond, 1}, // 2 per second refill one token in half a second
		{100 * time.Millisecond, 0},
		{400 * time.Millisecond, 1},
		{time.Hour, 3}, // never more than the burst
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		for range s.ok {
			if err := list(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		cloudtest.WantCode(t, list(), domain.ErrThrottled, sim.CodeThrottled)
	}
	if _, err := c.ResolveImage(ctx, "other-op", domain.RunnerSpec{}); err != nil {
		t.Fatalf("throttling leaked to another operation: %v", err)
	}
	c.Throttle(sim.OpDescribeInstances, 0, 0)
	for range 10 {
		if err := list(); err != nil {
			t.Fatalf("after removing the limit: %v", err)
		}
	}
	if got := c.Calls()[sim.OpDescribeInstances]; got != 13+10 {
		t.Fatalf("%d DescribeInstances calls counted, want throttled ones too", got)
	}
}

func TestFailNext(t *testing.T) {
	c, _ := newSim(t, sim.Options{})
	ctx := t.Context()
	spec := domain.LaunchSpec{ImageID: "ami-1", Count: 2}

	c.FailNext(sim.OpCreateFleet, 2, domain.ErrInsufficientCapacity)
	for range 2 {
		got, err := c.Create(ctx, spec)
		cloudtest.WantCode(t, err, domain.ErrInsufficientCapacity, sim.CodeInsufficient)
		if len(got) != 0 {
			t.Fatalf("failed call created %v", got)
		}
	}
	ids := create(t, c, 2, nil)
	if n := len(c.Instances()); n != 2 {
		t.Fatalf("%d machines, want 2", n)
	}

	custom := &domain.CloudError{Code: "Unsupported", Err: domain.ErrInvalidRequest}
	c.FailNext(sim.OpStopInstances, 1, custom)
	err := c.Stop(ctx, ids)
	cloudtest.WantCode(t, err, domain.ErrInvalidRequest, "Unsupported")
	var ce *domain.CloudError
	if errors.As(err, &ce) && ce.Op != sim.OpStopInstances {
		t.Fatalf("Op %q", ce.Op)
	}
	wantState(t, c, ids[0], domain.CloudRunning)

	c.FailNext(sim.OpStartInstances, 1, nil)
	if err := c.Start(ctx, ids); !errors.As(err, &ce) || ce.Code != sim.CodeInternal {
		t.Fatalf("FailNext with a nil error: %v", err)
	}
	if err := c.Start(ctx, ids); err != nil {
		t.Fatalf("second call still failed: %v", err)
	}

	c.FailNext(sim.OpTerminateInstances, 5, domain.ErrThrottled)
	c.FailNext(sim.OpTerminateInstances, 0, nil)
	if err := c.Terminate(ctx, ids); err != nil {
		t.Fatalf("after clearing: %v", err)
	}
}

func TestThrottledCallsDoNotUseUpFailures(t *testing.T) {
	c, _ := newSim(t, sim.Options{})
	ctx := t.Context()
	resolve := func() error {
		_, err := c.ResolveImage(ctx, "x", domain.RunnerSpec{})
		return err
	}
	c.Throttle(sim.OpDescribeImages, 0, 1)
	if err := resolve(); err != nil {
		t.Fatal(err)
	}
	c.FailNext(sim.OpDescribeImages, 1, domain.ErrUnknownImage)
	cloudtest.WantCode(t, resolve(), domain.ErrThrottled, sim.CodeThrottled)
	c.Throttle(sim.OpDescribeImages, 0, 0)
	cloudtest.WantCode(t, resolve(), domain.ErrUnknownImage, sim.CodeAMINotFound)
	if err := resolve(); err != nil {
		t.Fatalf("the failure outlived its count: %v", err)
	}
}
