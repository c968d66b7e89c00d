package dispatch

import (
	"context"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
)

func TestInstanceOfRunnerReadsBackRunnerName(t *testing.T) {
	for _, id := range []string{"bp-3f9a0c1d2e4b5a69", domain.NewID("bp"), "bp-a", "bp-with-dashes-7"} {
		for _, job := range []int64{1, 42, 9_000_000_000_123} {
			name := RunnerName(id, job)
			got, ok := InstanceOfRunner(name)
			if !ok || got != id {
				t.Errorf("InstanceOfRunner(%q) = %q, %v; want %q", name, got, ok, id)
			}
		}
	}
}

// GitHub reports whichever runner took a job: a hosted runner, another
// tool's self-hosted runner, a name mangled in transit. None of them names
// an instance of ours.
func TestInstanceOfRunnerRefusesOtherNames(t *testing.T) {
	for _, name := range []string{
		"",
		"GitHub Actions 2",
		"ubuntu-latest-12",
		"my-runner-7",
		"BP-3f9a-42",                   // bullpen's prefix is lower case
		"xbp-3f9a-42",                  // prefix not at the start
		"bp-3f9a",                      // no job id
		"bp-3f9a-",                     // empty job id
		"bp-3f9a-x42",                  // job id not a number
		"bp-3f9a-4.2",                  // nor a decimal
		"bp-3f9a-99999999999999999999", // beyond int64
		"-42",
		"bp",
	} {
		if got, ok := InstanceOfRunner(name); ok {
			t.Errorf("InstanceOfRunner(%q) = %q, want refused", name, got)
		}
	}
}

// cancellingStore cancels job cancel just before the dispatcher records its
// assignment, as a cancelled webhook landing mid-batch does.
type cancellingStore struct {
	*sqlite.Store
	cancel int64
}

func (s *cancellingStore) TransitionJobs(ctx context.Context, reqs []domain.JobTransitionRequest) ([]domain.JobTransitionResult, error) {
	if s.cancel != 0 {
		if _, err := jobs.MarkCompleted(ctx, s.Store, s.cancel, t0, "cancelled"); err != nil {
			return nil, err
		}
		s.cancel = 0
	}
	return s.Store.TransitionJobs(ctx, reqs)
}

// The registration is written on the instance before the job records its
// assignment; a job that then fails to record it gives the instance back
// without the runner, and the unused registration is removed.
func TestLostAssignmentTakesTheRunnerBack(t *testing.T) {
	f := newFixture(t)
	hot := f.members("p", domain.RoleHot, domain.StateReady, 2)
	f.queueJobs("p", 1, 2)
	d, err := New(Deps{
		Store: &cancellingStore{Store: f.store, cancel: 1}, Queue: f.queue, Cloud: f.cloud, GitHub: f.gh, Clock: f.clk,
		Log: f.d.Log, Scope: f.d.Scope, Notify: f.d.Notify,
	}, nil, Options{Wait: -1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Step(f.ctx)
	if err != nil || res.Assigned != 1 || res.Retried != 1 {
		t.Fatalf("result %+v err %v", res, err)
	}
	if j := f.job(1); j.Status != domain.JobCompleted || j.InstanceID != "" || j.RunnerName != "" {
		t.Fatalf("cancelled job %s on %q runner %q", j.Status, j.InstanceID, j.RunnerName)
	}
	j2 := f.job(2)
	for _, m := range hot {
		in, err := f.store.GetInstance(f.ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case in.ID == j2.InstanceID:
			if in.State != domain.StateClaimed || in.RunnerName != j2.RunnerName || in.RunnerConfig == "" {
				t.Fatalf("serving instance %s %s runner %q (config set: %t)", in.ID, in.State, in.RunnerName, in.RunnerConfig != "")
			}
		case in.State != domain.StateReady || in.Job != "" || in.RunnerName != "" || in.RunnerConfig != "":
			t.Fatalf("given-back instance %s %s job %q runner %q (config set: %t), want ready without a runner",
				in.ID, in.State, in.Job, in.RunnerName, in.RunnerConfig != "")
		}
	}
	if j2.RunnerName != RunnerName(j2.InstanceID, 2) {
		t.Fatalf("job 2 got runner %q", j2.RunnerName)
	}
	runners, err := f.gh.ListRunners(f.ctx, f.d.Scope(j2))
	if err != nil {
		t.Fatal(err)
	}
	if len(runners) != 1 || runners[0].Name != j2.RunnerName {
		t.Fatalf("registered runners %+v, want only job 2's %q", runners, j2.RunnerName)
	}
}
