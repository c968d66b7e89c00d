package sim_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/sim"
)

var probes atomic.Int64 // names the runners portCalls registers

var portOps = []string{sim.OpRegisterRunner, sim.OpListRunners, sim.OpDeleteRunner, sim.OpQueuedJobs, sim.OpGetJob, sim.OpCancelRun}

// portCalls makes one call of each port method and returns their errors by
// operation name.
func portCalls(ctx context.Context, gh *sim.GitHub) map[string]error {
	errs := map[string]error{}
	_, errs[sim.OpRegisterRunner] = gh.RegisterRunner(ctx, org, "probe-"+itoa(probes.Add(1)), []string{"x"})
	_, errs[sim.OpListRunners] = gh.ListRunners(ctx, org)
	errs[sim.OpDeleteRunner] = gh.DeleteRunner(ctx, org, 1)
	_, errs[sim.OpQueuedJobs] = gh.QueuedJobs(ctx, org)
	_, errs[sim.OpGetJob] = gh.GetJob(ctx, "acme/app", 1)
	errs[sim.OpCancelRun] = gh.CancelRun(ctx, "acme/app", 1)
	return errs
}

func TestFailNextFailsThatOperationNTimes(t *testing.T) {
	boom := errors.New("boom")
	for _, op := range portOps {
		t.Run(op, func(t *testing.T) {
			e := newEnv(t, sim.Options{})
			e.gh.FailNext(op, 2, boom)
			for i := range 3 {
				for other, err := range portCalls(t.Context(), e.gh) {
					injected := errors.Is(err, boom)
					if want := other == op && i < 2; injected != want {
						t.Errorf("round %d: %s error %v, injected %t want %t", i, other, err, injected, want)
					}
				}
			}
			if got := e.gh.Calls()[op]; got != 3 {
				t.Errorf("Calls()[%s] = %d, want 3 (failed calls count)", op, got)
			}
		})
	}
}

func TestFailNextWithoutAnErrorAndClearing(t *testing.T) {
	e := newEnv(t, sim.Options{})
	e.gh.FailNext(sim.OpListRunners, 1, nil)
	if _, err := e.gh.ListRunners(t.Context(), org); !errors.Is(err, sim.ErrInjected) {
		t.Errorf("got %v, want ErrInjected", err)
	}
	e.gh.FailNext(sim.OpListRunners, 5, nil)
	e.gh.FailNext(sim.OpListRunners, 0, nil)
	if _, err := e.gh.ListRunners(t.Context(), org); err != nil {
		t.Errorf("after clearing: %v", err)
	}
	e.gh.FailNext(sim.OpRunJIT, 1, nil)
	reg := e.register("r1", "x")
	if err := e.gh.RunJIT(t.Context(), reg.JITConfig, nil, nil); !errors.Is(err, sim.ErrInjected) {
		t.Errorf("RunJIT: %v, want ErrInjected", err)
	}
	if err := e.gh.RunJIT(t.Context(), reg.JITConfig, nil, nil); err != nil {
		t.Errorf("a runner that failed to connect cannot retry: %v", err)
	}
}

func TestRateLimitUntilReset(t *testing.T) {
	e := newEnv(t, sim.Options{})
	reg := e.register("r1", "x")
	reset := epoch.Add(time.Minute)
	e.gh.RateLimit(reset)
	for op, err := range portCalls(t.Context(), e.gh) {
		var rl *sim.RateLimitError
		if !errors.Is(err, domain.ErrRateLimited) || !errors.As(err, &rl) || !rl.Reset.Equal(reset) {
			t.Errorf("%s under the limit: %v, want a RateLimitError resetting at %v", op, err, reset)
		}
	}
	if err := e.gh.RunJIT(t.Context(), reg.JITConfig, nil, nil); err != nil {
		t.Errorf("the runner's own connection is not rate limited: %v", err)
	}
	e.advance(time.Minute - time.Second)
	if _, err := e.gh.ListRunners(t.Context(), org); !errors.Is(err, domain.ErrRateLimited) {
		t.Errorf("a second before the reset: %v", err)
	}
	e.advance(time.Second)
	for op, err := range portCalls(t.Context(), e.gh) {
		if errors.Is(err, domain.ErrRateLimited) {
			t.Errorf("%s after the reset: %v", op, err)
		}
	}
}

func TestCallsCountsByOperation(t *testing.T) {
	e := newEnv(t, sim.Options{})
	portCalls(t.Context(), e.gh)
	portCalls(t.Context(), e.gh)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	portCalls(ctx, e.gh) // not made: the context has ended
	want := map[string]int{
		sim.OpRegisterRunner: 2, sim.OpListRunners: 2, sim.OpDeleteRunner: 2,
		sim.OpQueuedJobs: 2, sim.OpGetJob: 2, sim.OpCancelRun: 2,
	}
	got := e.gh.Calls()
	for op, n := range want {
		if got[op] != n {
			t.Errorf("Calls()[%s] = %d, want %d", op, got[op], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("Calls() = %v", got)
	}
}
