package dispatch

import (
	"context"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
)

// cancellingStore cancels job cancel just before the dispatcher records its
// assignment or its overflow, as a cancelled webhook landing mid-batch does.
type cancellingStore struct {
	*sqlite.Store
	cancel int64
}

func (s *cancellingStore) CommitEach(ctx context.Context, cs []domain.Change) ([]domain.ChangeResult, error) {
	if err := s.cancelFirst(ctx); err != nil {
		return nil, err
	}
	return s.Store.CommitEach(ctx, cs)
}

func (s *cancellingStore) TransitionJobs(ctx context.Context, reqs []domain.JobTransitionRequest) ([]domain.JobTransitionResult, error) {
	if err := s.cancelFirst(ctx); err != nil {
		return nil, err
	}
	return s.Store.TransitionJobs(ctx, reqs)
}

func (s *cancellingStore) cancelFirst(ctx context.Context) error {
	if s.cancel == 0 {
		return nil
	}
	j, err := s.GetJob(ctx, s.cancel)
	if err != nil {
		return err
	}
	done := domain.Lifecycle{}.CompleteJob(j, t0, "cancelled")
	if _, err := s.TransitionJob(ctx, j.ID, done.Guard, done.Apply); err != nil {
		return err
	}
	s.cancel = 0
	return nil
}

// The job and the instance's runner are recorded in one change: a job that
// cannot record its assignment leaves its instance without the runner, the
// instance is given back, and the unused registration is removed.
func TestLostAssignmentTakesTheRunnerBack(t *testing.T) {
	f := newFixture(t)
	hot := f.members("p", domain.RoleHot, domain.StateReady, 2)
	f.queueJobs("p", 1, 2)
	d := f.dispatcherWith(func(d *Deps) { d.Store = &cancellingStore{Store: f.Store, cancel: 1} }, Options{Wait: -1})
	res, err := d.Step(f.Ctx)
	if err != nil || res.Assigned != 1 || res.Retried != 1 {
		t.Fatalf("result %+v err %v", res, err)
	}
	if j := f.Job(1); j.Status != domain.JobCompleted || j.InstanceID != "" || j.RunnerName != "" {
		t.Fatalf("cancelled job %s on %q runner %q", j.Status, j.InstanceID, j.RunnerName)
	}
	j2 := f.Job(2)
	for _, m := range hot {
		in, err := f.Store.GetInstance(f.Ctx, m.ID)
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
	if j2.RunnerName != domain.RunnerName(j2.InstanceID, 2) {
		t.Fatalf("job 2 got runner %q", j2.RunnerName)
	}
	runners, err := f.gh.ListRunners(f.Ctx, f.d.Scope(j2))
	if err != nil {
		t.Fatal(err)
	}
	if len(runners) != 1 || runners[0].Name != j2.RunnerName {
		t.Fatalf("registered runners %+v, want only job 2's %q", runners, j2.RunnerName)
	}
}
