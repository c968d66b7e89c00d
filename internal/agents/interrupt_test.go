package agents_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/promtest"
	"github.com/bullpen-ci/bullpen/internal/reaper"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
)

// writeLog is the fixture's store, recording every write that changes an
// instance or a job.
type writeLog struct {
	*sqlite.Store
	mu     sync.Mutex
	writes []string // "commit 1+1" (instances+jobs), "instance", "job"
	// before, when set, runs before the next commit: another writer
	// getting there first.
	before func()
}

func (w *writeLog) note(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, s)
}

func (w *writeLog) Commit(ctx context.Context, c domain.Change) (domain.Changed, error) {
	if w.before != nil {
		w.before()
		w.before = nil
	}
	done, err := w.Store.Commit(ctx, c)
	if err == nil {
		w.note(fmt.Sprintf("commit %d+%d", len(c.Instances), len(c.Jobs)))
	}
	return done, err
}

func (w *writeLog) Transition(ctx context.Context, id string, g domain.Guard, fn func(*domain.Instance)) (domain.Instance, error) {
	in, err := w.Store.Transition(ctx, id, g, fn)
	if err == nil {
		w.note("instance")
	}
	return in, err
}

func (w *writeLog) TransitionJob(ctx context.Context, id int64, g domain.JobGuard, fn func(*domain.Job)) (domain.Job, error) {
	j, err := w.Store.TransitionJob(ctx, id, g, fn)
	if err == nil {
		w.note("job")
	}
	return j, err
}

// spotRig is the fixture with a service over a writeLog, its metrics, and
// the runner classes the spot circuit breaker was told of.
type spotRig struct {
	*fixture
	svc    *agents.Service
	writes *writeLog
	reg    *prometheus.Registry
	told   []string
}

func newSpotRig(t *testing.T) *spotRig {
	r := &spotRig{fixture: newFixture(t), reg: prometheus.NewRegistry()}
	r.writes = &writeLog{Store: r.Store}
	var err error
	r.svc, err = agents.New(r.writes, r.Queue, r.Clock, r.Log, r.reg, agents.Options{
		Policy:      func(domain.Instance) agents.Policy { return r.policy },
		Interrupted: func(runner string, at time.Time) { r.told = append(r.told, runner) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *spotRig) interrupt(in domain.Instance) {
	r.T.Helper()
	r.notice(in, "terminate at 09:02:00")
}

// notice reports a spot interruption notice for in, as its agent words it.
func (r *spotRig) notice(in domain.Instance, report string) {
	r.T.Helper()
	err := r.svc.Signal(r.Ctx, domain.Signal{CloudID: in.CloudID, Kind: domain.SignalInterrupted, Reason: report})
	if err != nil {
		r.T.Fatal(err)
	}
}

// wantFirstWrite fails unless the first write was one change of the
// instance and its job together.
func (r *spotRig) wantFirstWrite(want string) {
	r.T.Helper()
	r.writes.mu.Lock()
	defer r.writes.mu.Unlock()
	if len(r.writes.writes) == 0 || r.writes.writes[0] != want {
		r.T.Fatalf("writes %v, want the first to be %q", r.writes.writes, want)
	}
}

// counted reads bullpen_spot_interruptions_total{job=job}.
func (r *spotRig) counted(job string) float64 {
	r.T.Helper()
	v, _ := promtest.Value(r.T, r.reg, "bullpen_spot_interruptions_total", "job", job)
	return v
}

// A spot interruption notice takes the instance out of service at once;
// the job it had not started goes back to its queue in the same change.
func TestInterruptedRequeuesAnUnstartedJobInTheSameChange(t *testing.T) {
	r := newSpotRig(t)
	in := r.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateClaimed, Job: "42", Runner: "spot-x64"})
	r.createJob(domain.Job{ID: 42, Status: domain.JobAssigned, Route: domain.RouteLaunch, InstanceID: in.ID, Via: domain.ViaCold, Attempts: 1})
	r.interrupt(in)
	r.wantFirstWrite("commit 1+1")
	if after := r.Instance(in.ID); after.State != domain.StateTerminating || after.Job != "" {
		t.Fatalf("instance %s bound to %q, want terminating, unbound", after.State, after.Job)
	}
	wantRequeued(t, r.fixture, domain.RouteLaunch)
	if j := r.Job(42); j.Interrupted {
		t.Fatal("an unstarted job was marked interrupted")
	}
	if got := r.counted("requeued"); got != 1 {
		t.Fatalf("%v interruptions with a requeued job counted, want 1", got)
	}
}

// A job that had started is GitHub's: it is marked interrupted (to be
// re-run), not requeued, in the same change that takes the instance out of
// service; its instance keeps it, so that the completed webhook finds it,
// and runs on until the notice's time (a report without a time it can
// read gives the notice's two minutes), so that the job may finish.
// GitHub's in_progress alone says it started, as does the agent's report.
func TestInterruptedMarksAStartedJob(t *testing.T) {
	for _, tc := range []struct {
		name         string
		agentStarted bool // the agent reported job-started
		status       domain.JobStatus
	}{
		{"started by the agent's report", true, domain.JobAssigned},
		{"started by the agent's and GitHub's reports", true, domain.JobRunning},
		{"started by GitHub's report alone", false, domain.JobRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSpotRig(t)
			in := r.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateRunning, Job: "42", JobStarted: tc.agentStarted, Runner: "spot-x64"})
			r.createJob(domain.Job{ID: 42, Status: tc.status, Route: domain.RouteLaunch, InstanceID: in.ID, Via: domain.ViaCold, Attempts: 1})
			r.interrupt(in)
			r.wantFirstWrite("commit 1+1")
			after := r.Instance(in.ID)
			if !after.Leaving() || after.Job != "42" || !after.JobStarted {
				t.Fatalf("instance %s bound to %q (started %t, reason %q), want it leaving service, still bound to its started job",
					after.State, after.Job, after.JobStarted, after.Reason)
			}
			if want := t0.Add(2 * time.Minute); !after.Deadline.Equal(want) || !after.Detached() {
				t.Fatalf("instance until %s (detached %t), want until the notice's time %s, no pool's member",
					after.Deadline, after.Detached(), want)
			}
			j := r.Job(42)
			if !j.Interrupted || j.Status != tc.status || j.InstanceID != in.ID || j.Attempts != 1 {
				t.Fatalf("job %+v, want it %s on %s, marked interrupted", j, tc.status, in.ID)
			}
			if visible, delayed := r.queued(domain.QueueLaunch); visible+delayed != 0 {
				t.Fatal("a started job was sent back to its queue")
			}
			if got := r.counted("started"); got != 1 {
				t.Fatalf("%v interruptions with a started job counted, want 1", got)
			}
		})
	}
}

// Whatever the instance was doing, it leaves service at once: an idle pool
// member can no longer be claimed from its pool or its resource-pool entry.
// One already terminating is left as it is; a repeated notice is counted
// and told to the spot circuit breaker once.
func TestInterruptedInEachState(t *testing.T) {
	for _, tc := range []struct {
		state   domain.State
		changed bool
	}{
		{domain.StateBooting, true},
		{domain.StateReady, true},
		{domain.StateReleasing, true},
		{domain.StateError, true},
		{domain.StateTerminating, false},
	} {
		t.Run(string(tc.state), func(t *testing.T) {
			r := newSpotRig(t)
			in := r.CreateInstance(domain.Instance{ID: "bp-1", State: tc.state, Runner: "spot-x64"})
			for range 2 {
				r.interrupt(r.Instance(in.ID))
			}
			after := r.Instance(in.ID)
			if after.State != domain.StateTerminating {
				t.Fatalf("instance %s, want terminating", after.State)
			}
			if !tc.changed {
				r.WantUnchanged(in)
				if len(r.told) != 0 || r.counted("none") != 0 {
					t.Fatalf("an instance already leaving was counted (breaker told %v)", r.told)
				}
				return
			}
			if len(r.told) != 1 || r.told[0] != "spot-x64" || r.counted("none") != 1 {
				t.Fatalf("breaker told %v, %v counted; want spot-x64 once", r.told, r.counted("none"))
			}
			claim := domain.NewLifecycle(domain.Deadlines{}).ClaimIdle(in.ID, "7", r.Clock.Now())
			if _, err := r.Store.Transition(r.Ctx, claim.ID, claim.Guard, claim.Apply); err == nil {
				t.Fatal("an interrupted instance was claimed from its resource-pool entry")
			}
		})
	}
}

// An instance that changes between the notice's read and its change (its
// agent's warm signal, say) is read again: the notice takes effect at
// once, without waiting for the agent to report again.
func TestInterruptedDecidesAgainOnAnInstanceThatMovedOn(t *testing.T) {
	r := newSpotRig(t)
	in := r.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateBooting, Runner: "spot-x64"})
	r.writes.before = func() {
		if err := r.fixture.signal(in, domain.SignalWarm, ""); err != nil {
			t.Error(err)
		}
	}
	r.interrupt(in)
	if after := r.Instance(in.ID); after.State != domain.StateTerminating {
		t.Fatalf("instance %s, want terminating", after.State)
	}
}

// startedSpot writes a spot instance running job 42, which started.
func (r *spotRig) startedSpot() domain.Instance {
	r.T.Helper()
	in := r.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateRunning, Job: "42", JobStarted: true, Runner: "spot-x64"})
	r.createJob(domain.Job{ID: 42, Status: domain.JobRunning, Route: domain.RouteLaunch, InstanceID: in.ID, Via: domain.ViaCold, Attempts: 1})
	return in
}

// The instance of a started job leaves service at the notice but is
// terminated only at the notice's time, as the agent reports it (capped at
// the notice's two minutes): terminated at once, it would cut the job
// short up to two minutes before the cloud does.
func TestInterruptedInstanceRunsUntilTheNoticeTime(t *testing.T) {
	for _, tc := range []struct {
		name, report string
		until        time.Time
	}{
		{"at the notice's time", "terminate at 2026-11-23T09:01:30Z", t0.Add(90 * time.Second)},
		{"a time past two minutes is capped", "terminate at 2026-11-23T09:30:00Z", t0.Add(2 * time.Minute)},
		{"no time it can read", "hibernate at once", t0.Add(2 * time.Minute)},
		{"no report", "", t0.Add(2 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSpotRig(t)
			in := r.startedSpot()
			r.notice(in, tc.report)
			after := r.Instance(in.ID)
			if !after.Leaving() || !after.Deadline.Equal(tc.until) {
				t.Fatalf("instance %s (reason %q) until %s, want it leaving service until %s", after.State, after.Reason, after.Deadline, tc.until)
			}
			term := &reaper.Terminator{Store: r.Store, Queue: r.Queue, Clock: r.Clock, Log: r.Log}
			r.Clock.AdvanceTo(tc.until.Add(-time.Second))
			if n, err := term.Expire(r.Ctx); err != nil || n != 0 {
				t.Fatalf("deadline sweep before the notice's time: %d marked, %v; want none", n, err)
			}
			r.WantUnchanged(after)
			r.Clock.AdvanceTo(tc.until)
			if n, err := term.Expire(r.Ctx); err != nil || n != 1 {
				t.Fatalf("deadline sweep at the notice's time: %d marked, %v; want the instance", n, err)
			}
			if got := r.Instance(in.ID); got.State != domain.StateTerminating {
				t.Fatalf("instance %s at the notice's time, want terminating", got.State)
			}
		})
	}
}

// An instance leaving service is out of it: nothing claims it, no pool
// counts it, and a repeated notice or its agent's failure changes nothing
// (the spot circuit breaker is told once).
func TestALeavingInstanceStaysOutOfService(t *testing.T) {
	r := newSpotRig(t)
	in := r.startedSpot()
	r.interrupt(in)
	leaving := r.Instance(in.ID)
	r.interrupt(leaving)
	if err := r.svc.Signal(r.Ctx, domain.Signal{CloudID: in.CloudID, Kind: domain.SignalFailed, Reason: "runner crashed"}); err != nil {
		t.Fatal(err)
	}
	r.WantUnchanged(leaving)
	if len(r.told) != 1 || r.counted("started") != 1 {
		t.Fatalf("breaker told %v, %v counted; want once", r.told, r.counted("started"))
	}
	if !leaving.Detached() {
		t.Fatal("a leaving instance counts as a pool member")
	}
	claim := domain.NewLifecycle(domain.Deadlines{}).ClaimIdle(in.ID, "7", r.Clock.Now())
	if _, err := r.Store.Transition(r.Ctx, claim.ID, claim.Guard, claim.Apply); err == nil {
		t.Fatal("a leaving instance was claimed")
	}
	if got, err := r.svc.Next(r.Ctx, in.CloudID); err != nil || got.Kind != domain.InstructionWait {
		t.Fatalf("leaving instance told %s (%v), want wait", got.Kind, err)
	}
}

// A started job that finishes before the notice's time (as its agent or
// GitHub reports) retires its instance, even under a policy of reuse: its
// machine is going. The job keeps its interrupted mark, by which the
// reaper re-runs it only if GitHub failed it.
func TestAJobFinishedBeforeTheNoticeTimeRetiresItsInstance(t *testing.T) {
	for _, tc := range []struct {
		name   string
		finish func(r *spotRig) error
	}{
		{"its agent's report", func(r *spotRig) error {
			return r.svc.Signal(r.Ctx, domain.Signal{CloudID: "i-bp-1", Kind: domain.SignalJobFinished, Job: "42", Reason: "exit 0"})
		}},
		{"GitHub's report", func(r *spotRig) error { return r.svc.Finish(r.Ctx, 42, "success") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSpotRig(t)
			r.policy = agentsPolicy(true, time.Hour)
			in := r.startedSpot()
			r.interrupt(in)
			r.Clock.Advance(time.Minute)
			if err := tc.finish(r); err != nil {
				t.Fatal(err)
			}
			after := r.Instance(in.ID)
			if after.State != domain.StateTerminating || !strings.Contains(after.Reason, "spot interruption") {
				t.Fatalf("instance %s (%q) after its job, want terminating for the interruption", after.State, after.Reason)
			}
			if got := r.ResourcePool(in.Runner); len(got) != 0 {
				t.Fatalf("resource pool %v, want the leaving instance never offered", got)
			}
			if got := r.notifications(); len(got) != 0 {
				t.Fatalf("agents told to release: %v, want none", got)
			}
			if j := r.Job(42); j.Status != domain.JobCompleted || !j.Interrupted {
				t.Fatalf("job %s (interrupted %t), want completed, still marked interrupted", j.Status, j.Interrupted)
			}
		})
	}
}
