package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// bind is the change that binds instance id (ready) to job (queued).
func bind(id string, jobID int64) domain.Change {
	return domain.Change{
		Instances: []domain.TransitionRequest{{ID: id, Guard: readyUnbound, Apply: claim(domain.JobKey(jobID))}},
		Jobs:      []domain.JobTransitionRequest{{ID: jobID, Guard: queuedGuard, Apply: assign(id)}},
	}
}

func testCommitWritesAll(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady))
	e.createJobs(job(7, domain.JobQueued))
	got, err := e.s.Commit(e.ctx, bind("a", 7))
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	in, j := e.get("a"), e.getJob(7)
	if in.State != domain.StateClaimed || in.Job != "7" || in.Version != 2 {
		t.Errorf("instance after commit: state %s job %q version %d; want claimed, 7, 2", in.State, in.Job, in.Version)
	}
	if j.Status != domain.JobAssigned || j.InstanceID != "a" || j.Version != 2 {
		t.Errorf("job after commit: status %s instance %q version %d; want assigned, a, 2", j.Status, j.InstanceID, j.Version)
	}
	if len(got.Instances) != 1 || len(got.Jobs) != 1 {
		t.Fatalf("changed: %d instances, %d jobs; want 1 and 1", len(got.Instances), len(got.Jobs))
	}
	sameInstance(t, "returned instance", got.Instances[0], in)
	sameJob(t, "returned job", got.Jobs[0], j)
}

func testCommitRefusedWritesNothing(t *testing.T, e *env) {
	cases := []struct {
		name   string
		change func() domain.Change
		want   error
	}{
		{"job guard fails", func() domain.Change {
			c := bind("a", 7)
			c.Jobs[0].Guard = domain.JobGuard{Status: domain.JobQueued, Version: 9}
			return c
		}, domain.ErrConflict},
		{"instance guard fails", func() domain.Change {
			c := bind("a", 7)
			c.Instances[0].Guard = domain.Guard{State: domain.StateStopped}
			return c
		}, domain.ErrConflict},
		{"unknown job", func() domain.Change {
			c := bind("a", 7)
			c.Jobs = append(c.Jobs, domain.JobTransitionRequest{ID: 99, Guard: queuedGuard, Apply: assign("a")})
			return c
		}, domain.ErrNotFound},
		{"illegal job transition", func() domain.Change {
			c := bind("a", 7)
			c.Jobs[0].Apply = toStatus(domain.JobQueued)
			c.Jobs = append(c.Jobs, domain.JobTransitionRequest{ID: 7, Guard: queuedGuard, Apply: toStatus(domain.JobStatus("lost"))})
			return c
		}, nil},
	}
	e.create(instance("a", domain.StateReady))
	e.createJobs(job(7, domain.JobQueued))
	inBefore, jobBefore := e.get("a"), e.getJob(7)
	for _, c := range cases {
		_, err := e.s.Commit(e.ctx, c.change())
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: commit returned %v; want a refusal (%v)", c.name, err, c.want)
		}
		e.unchanged(inBefore)
		e.jobUnchanged(jobBefore)
	}
}

// A swap moves two jobs between two instances; the second request on a
// row is guarded by the version the first one wrote.
func testCommitInOrder(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady))
	e.createJobs(job(7, domain.JobQueued))
	c := bind("a", 7)
	c.Instances = append(c.Instances, domain.TransitionRequest{ID: "a",
		Guard: domain.Guard{State: domain.StateClaimed, Job: "7", Version: 2}, Apply: to(domain.StateRunning)})
	if _, err := e.s.Commit(e.ctx, c); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if got := e.get("a"); got.State != domain.StateRunning || got.Version != 3 {
		t.Fatalf("instance: state %s version %d; want running at version 3", got.State, got.Version)
	}
}

func testCommitEmpty(t *testing.T, e *env) {
	got, err := e.s.Commit(e.ctx, domain.Change{})
	if err != nil || len(got.Instances) != 0 || len(got.Jobs) != 0 {
		t.Fatalf("empty commit: %+v, %v; want nothing and no error", got, err)
	}
}

// Many instances race to take one job: the job is bound to exactly one of
// them and every loser's instance is left as it was.
func testConcurrentCommits(t *testing.T, e *env) {
	const racers = 16
	for k := range racers {
		e.create(instance(fmt.Sprintf("r%02d", k), domain.StateReady))
	}
	e.createJobs(job(7, domain.JobQueued))
	errs := make([]error, racers)
	race(racers, func(k int) {
		_, errs[k] = e.s.Commit(e.ctx, bind(fmt.Sprintf("r%02d", k), 7))
	})
	winner := soleWinner(t, "racer", "bound the job", errs, anyConflict)
	for k := range racers {
		in := e.get(fmt.Sprintf("r%02d", k))
		if (k == winner) != (in.State == domain.StateClaimed) {
			t.Errorf("racer %d: instance %s; only the winner's may be claimed", k, in.State)
		}
	}
	if j := e.getJob(7); j.InstanceID != fmt.Sprintf("r%02d", winner) {
		t.Errorf("job bound to %q; want the winner r%02d", j.InstanceID, winner)
	}
}

// Each change of a batch stands or falls alone: a refused one leaves no
// trace, even of its transitions that would have passed.
func testCommitEach(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady), instance("b", domain.StateReady), instance("c", domain.StateReady))
	e.createJobs(job(1, domain.JobQueued), job(2, domain.JobQueued), job(3, domain.JobQueued))
	bBefore := e.get("b")
	bad := bind("b", 2)
	bad.Jobs[0].Guard = domain.JobGuard{Status: domain.JobAssigned}
	res, err := e.s.CommitEach(e.ctx, []domain.Change{bind("a", 1), bad, bind("c", 3)})
	if err != nil {
		t.Fatalf("commit each: %v", err)
	}
	if len(res) != 3 || res[0].Err != nil || !errors.Is(res[1].Err, domain.ErrConflict) || res[2].Err != nil {
		t.Fatalf("results %+v; want ok, conflict, ok", res)
	}
	e.unchanged(bBefore)
	if j := e.getJob(2); j.Status != domain.JobQueued || j.Version != 1 {
		t.Fatalf("job 2 %s at version %d: the refused change was written", j.Status, j.Version)
	}
	for k, id := range []string{"a", "c"} {
		in, j := e.get(id), e.getJob(int64(2*k+1))
		if in.State != domain.StateClaimed || j.InstanceID != id {
			t.Errorf("%s %s, its job on %q: want bound to each other", id, in.State, j.InstanceID)
		}
		sameInstance(t, "returned "+id, res[2*k].Instances[0], in)
		sameJob(t, "returned job of "+id, res[2*k].Jobs[0], j)
	}
}

func testCommitEachEmpty(t *testing.T, e *env) {
	res, err := e.s.CommitEach(e.ctx, nil)
	if err != nil || len(res) != 0 {
		t.Fatalf("empty batch: %v, %v; want nothing and no error", res, err)
	}
}
