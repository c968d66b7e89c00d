package serving_test

import (
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/serving"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

var t0 = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

type fixture struct {
	*testworld.World
	gh       *ghsim.GitHub
	p        *serving.Pipeline
	notified []string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{World: testworld.New(t, t0)}
	f.gh = ghsim.New(f.Clock, ghsim.Options{})
	f.p = &serving.Pipeline{Store: f.Store, GitHub: f.gh, Clock: f.Clock, Log: f.Log,
		Verbs: domain.NewLifecycle(domain.Deadlines{}), Scope: func(domain.Job) domain.Scope { return domain.Scope{Owner: "acme", Repo: "w"} },
		Notify: func(id string) { f.notified = append(f.notified, id) }}
	return f
}

// claimed writes instance id claimed for job and the job queued, and
// returns the handover of one to the other.
func (f *fixture) claimed(id string, job int64) *serving.Handover {
	f.T.Helper()
	if err := f.Store.CreateInstances(f.Ctx, []domain.Instance{{ID: id, CloudID: "i-" + id, State: domain.StateClaimed,
		Job: domain.JobKey(job), Deadline: t0.Add(time.Hour)}}); err != nil {
		f.T.Fatal(err)
	}
	if _, err := f.Store.CreateJobs(f.Ctx, []domain.Job{{ID: job, Status: domain.JobQueued, Labels: []string{"self-hosted"}}}); err != nil {
		f.T.Fatal(err)
	}
	in, j := f.rows(id, job)
	return &serving.Handover{Job: j, Inst: in, Via: domain.ViaPool}
}

func (f *fixture) rows(id string, job int64) (domain.Instance, domain.Job) {
	f.T.Helper()
	return f.Instance(id), f.Job(job)
}

func TestHandOverAssignsTheJobAndGivesTheInstanceItsRunner(t *testing.T) {
	f := newFixture(t)
	hs := []*serving.Handover{f.claimed("bp-1", 1), f.claimed("bp-2", 2)}
	ok, failed := f.p.HandOver(f.Ctx, hs)
	if len(ok) != 2 || len(failed) != 0 {
		t.Fatalf("%d handed over, %d failed", len(ok), len(failed))
	}
	for k, id := range []string{"bp-1", "bp-2"} {
		in, j := f.rows(id, int64(k+1))
		name := domain.RunnerName(id, int64(k+1))
		if j.Status != domain.JobAssigned || j.InstanceID != id || j.RunnerName != name || j.Via != domain.ViaPool {
			t.Errorf("job %d %s on %q runner %q via %s", j.ID, j.Status, j.InstanceID, j.RunnerName, j.Via)
		}
		if in.RunnerName != name || in.RunnerConfig == "" {
			t.Errorf("%s holds runner %q (config set: %t)", id, in.RunnerName, in.RunnerConfig != "")
		}
	}
	if len(f.notified) != 2 {
		t.Fatalf("notified %v, want both agents", f.notified)
	}
}

// A job that changed before its assignment (cancelled, say) is not
// assigned, and its instance is not given the runner: the change is one.
func TestHandOverOfAChangedJobWritesNothing(t *testing.T) {
	f := newFixture(t)
	h := f.claimed("bp-1", 1)
	done := domain.Lifecycle{}.CompleteJob(h.Job, t0, "cancelled")
	if _, err := f.Store.TransitionJob(f.Ctx, 1, done.Guard, done.Apply); err != nil {
		t.Fatal(err)
	}
	ok, failed := f.p.HandOver(f.Ctx, []*serving.Handover{h})
	if len(ok) != 0 || len(failed) != 1 || !errors.Is(h.Err, domain.ErrConflict) {
		t.Fatalf("ok %d failed %d err %v; want a conflict", len(ok), len(failed), h.Err)
	}
	if in, _ := f.rows("bp-1", 1); in.RunnerName != "" || in.RunnerConfig != "" {
		t.Fatalf("instance given runner %q for a job it will not run", in.RunnerName)
	}
	if h.Reg.RunnerID == 0 {
		t.Fatal("the failed handover forgot its runner: nobody can delete it")
	}
	if _, _, err := f.p.RollBack(f.Ctx, h, serving.Undo{Back: domain.StateReady, Deadline: t0.Add(time.Hour)}, "cancelled"); err != nil {
		t.Fatal(err)
	}
	if runners, _ := f.gh.ListRunners(f.Ctx, f.p.Scope(h.Job)); len(runners) != 0 {
		t.Fatalf("runners left after the roll back: %+v", runners)
	}
	if in, _ := f.rows("bp-1", 1); in.State != domain.StateReady || in.Job != "" {
		t.Fatalf("instance %s bound to %q after the roll back, want ready, unbound", in.State, in.Job)
	}
}

func TestRollBackUndoesTheJobAndTheInstanceTogether(t *testing.T) {
	for _, tc := range []struct {
		name  string
		undo  serving.Undo
		state domain.State
	}{
		{"back to its pool", serving.Undo{Back: domain.StateStopped, Deadline: t0.Add(time.Hour)}, domain.StateStopped},
		{"terminated", serving.Undo{Terminate: "did not register"}, domain.StateTerminating},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			h := f.claimed("bp-1", 1)
			if ok, _ := f.p.HandOver(f.Ctx, []*serving.Handover{h}); len(ok) != 1 {
				t.Fatal(h.Err)
			}
			in, ok, err := f.p.RollBack(f.Ctx, h, tc.undo, "did not register")
			if err != nil || !ok || in.State != tc.state {
				t.Fatalf("roll back: %s, %t, %v; want %s", in.State, ok, err, tc.state)
			}
			in, j := f.rows("bp-1", 1)
			if j.Status != domain.JobQueued || j.InstanceID != "" || j.RunnerName != "" {
				t.Fatalf("job %s on %q runner %q, want queued, unbound", j.Status, j.InstanceID, j.RunnerName)
			}
			if in.Job != "" || in.RunnerConfig != "" && tc.state != domain.StateTerminating {
				t.Fatalf("instance bound to %q, config set %t", in.Job, in.RunnerConfig != "")
			}
			if runners, _ := f.gh.ListRunners(f.Ctx, f.p.Scope(h.Job)); len(runners) != 0 {
				t.Fatalf("runners left: %+v", runners)
			}
		})
	}
}

// An instance whose job started meanwhile (GitHub says so) is not rolled
// back: its runner runs the job.
func TestRollBackLeavesAnInstanceThatMovedOn(t *testing.T) {
	f := newFixture(t)
	h := f.claimed("bp-1", 1)
	if ok, _ := f.p.HandOver(f.Ctx, []*serving.Handover{h}); len(ok) != 1 {
		t.Fatal(h.Err)
	}
	started := domain.Lifecycle{}.JobStarted(h.Inst)
	if _, err := f.Store.Transition(f.Ctx, started.ID, started.Guard, started.Apply); err != nil {
		t.Fatal(err)
	}
	h.Done()
	if _, ok, err := f.p.RollBack(f.Ctx, h, serving.Undo{Terminate: "late"}, "late"); err != nil || ok {
		t.Fatalf("roll back of a started instance: %t, %v; want left alone", ok, err)
	}
	if in, j := f.rows("bp-1", 1); in.State != domain.StateClaimed || in.Job != "1" || j.InstanceID != "bp-1" {
		t.Fatalf("instance %s bound to %q, job on %q: want both left as they are", in.State, in.Job, j.InstanceID)
	}
}

// A handover that names the runner the job is served with records it on
// the job, retry setting included, so that readers of the job's row see
// the runner it ran on; one that names none leaves the job's own.
func TestHandOverRecordsTheRunnerTheJobIsServedWith(t *testing.T) {
	f := newFixture(t)
	now := domain.RunnerSpec{Name: "large", Image: "ubuntu-24", Family: []string{"c7i"}, Retry: domain.RetryNever}
	named, unnamed := f.claimed("bp-1", 1), f.claimed("bp-2", 2)
	named.Runner, named.Spec = now.Name, now
	if ok, _ := f.p.HandOver(f.Ctx, []*serving.Handover{named, unnamed}); len(ok) != 2 {
		t.Fatalf("%d of 2 handed over", len(ok))
	}
	j := f.Job(1)
	if j.Status != domain.JobAssigned || j.Runner != "large" || j.Spec.Image != "ubuntu-24" || j.Spec.RerunsInterrupted() {
		t.Errorf("job 1 %s on runner %q, image %q, re-run when interrupted %t; want assigned on large, ubuntu-24, no re-run",
			j.Status, j.Runner, j.Spec.Image, j.Spec.RerunsInterrupted())
	}
	if named.Job.Runner != "large" {
		t.Errorf("the handover holds job 1 on runner %q, not as written", named.Job.Runner)
	}
	if j := f.Job(2); j.Status != domain.JobAssigned || j.Runner != "" || j.Spec.Name != "" {
		t.Errorf("job 2 %s on runner %q (spec %q); want assigned with its own, none", j.Status, j.Runner, j.Spec.Name)
	}
}
