package converger

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// steps runs the converger's loop step n times 30 s apart and returns
// each step's error and the reports it sent.
func (w *world) steps(n int) ([]error, []Report) {
	w.T.Helper()
	reports := make(chan Report, n)
	step := w.conv.Loop(reports).Step
	var errs []error
	var sent []Report
	for i := range n {
		if i > 0 {
			w.Clock.Pass(30 * time.Second)
		}
		errs = append(errs, step(context.Background()))
		select {
		case r := <-reports:
			sent = append(sent, r)
		default:
			w.T.Fatalf("step %d sent no report", i)
		}
	}
	return errs, sent
}

var refused = &domain.CloudError{Code: "UnauthorizedOperation", Err: domain.ErrUnauthorized}

// Credentials refused on every create: each cycle runs to its end, but
// the loop must count it as failed, so that /healthz shows it.
func TestCycleWhoseCloudCallsAllFailFailsItsStep(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 2}, sim.Options{Latency: latency}, Options{})
	w.cloud.FailNext(sim.OpCreateFleet, 1000, refused)
	errs, reports := w.steps(5)
	for i, err := range errs {
		if !errors.Is(err, domain.ErrUnauthorized) {
			t.Errorf("step %d: err = %v, want the refusal", i, err)
		}
	}
	if last := reports[len(reports)-1]; !errors.Is(last.Pools[0].Err, domain.ErrUnauthorized) || last.CloudErr == nil {
		t.Fatalf("last report: pool error %v, cycle error %v", last.Pools[0].Err, last.CloudErr)
	}
}

// The listing of every machine failing is the cycle's own call: with no
// pool call going through, the cycle is failed too.
func TestCycleWhoseListingFailsAndNoPoolActsFailsItsStep(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 1}, sim.Options{}, Options{})
	w.converge(5)
	w.cloud.FailNext(sim.OpDescribeInstances, 1, refused)
	if errs, _ := w.steps(1); !errors.Is(errs[0], domain.ErrUnauthorized) {
		t.Fatalf("err = %v, want the listing's refusal", errs[0])
	}
	if errs, _ := w.steps(1); errs[0] != nil {
		t.Fatalf("err = %v once the listing works", errs[0])
	}
}

// A capacity shortage is the cloud's answer, not a failure to reach it;
// nor is a cycle failed while another pool's calls go through.
func TestCycleWithCapacityShortageOrAPoolThatActsSucceeds(t *testing.T) {
	t.Run("capacity", func(t *testing.T) {
		w := newWorld(t, domain.Target{Hot: 2}, sim.Options{Latency: latency}, Options{})
		w.cloud.FailNext(sim.OpCreateFleet, 1000, domain.ErrInsufficientCapacity)
		errs, reports := w.steps(5)
		for i, err := range errs {
			if err != nil {
				t.Errorf("step %d: err = %v", i, err)
			}
		}
		if r := reports[len(reports)-1].Pools[0]; !errors.Is(r.Err, domain.ErrInsufficientCapacity) {
			t.Fatalf("pool error %v, want the shortage", r.Err)
		}
	})
	t.Run("some pool acts", func(t *testing.T) {
		w := newWorld(t, domain.Target{Hot: 1}, sim.Options{}, Options{})
		w.converge(5)
		shrinking := w.spec
		shrinking.Pool.Schedule = []domain.ScheduleEntry{{Name: "default"}}
		growing := w.spec
		growing.Pool.Name = "q"
		w.conv.pools = func() []PoolSpec { return []PoolSpec{shrinking, growing} }
		w.cloud.FailNext(sim.OpCreateFleet, 1, refused)
		errs, reports := w.steps(1)
		if errs[0] != nil {
			t.Fatalf("err = %v while pool p's terminate went through", errs[0])
		}
		pools := reports[0].Pools
		if Describe(pools[0].Plan) != "terminate/excess×1" || pools[0].Err != nil || !errors.Is(pools[1].Err, domain.ErrUnauthorized) {
			t.Fatalf("pool p: %s %v; pool q: %s %v", Describe(pools[0].Plan), pools[0].Err, Describe(pools[1].Plan), pools[1].Err)
		}
	})
}
