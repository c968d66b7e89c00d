package reaper

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestRunTerminatesRowsPastTheirDeadline(t *testing.T) {
	f := newFixture(t)
	soon, later := f.Clock.Now().Add(time.Minute), f.Clock.Now().Add(time.Hour)
	rows := []domain.Instance{
		{ID: "stuck-claim", State: domain.StateClaimed, Job: "1", Deadline: soon},
		{ID: "late-release", State: domain.StateReleasing, Deadline: soon},
		{ID: "errored", State: domain.StateError, Job: "2", Deadline: soon},
		{ID: "started-claim", State: domain.StateClaimed, Job: "3", JobStarted: true, Deadline: soon},
		{ID: "long-job", State: domain.StateRunning, Job: "4", JobStarted: true, Deadline: soon},
		{ID: "fresh", State: domain.StateReady, Deadline: later},
	}
	f.createRows(rows...)
	f.term.Interval = time.Minute
	stop := f.Run(f.term.Loop())
	f.Clock.BlockUntil(1) // the first sweep ran; nothing was due
	f.Clock.Advance(time.Minute)
	f.Clock.BlockUntil(1) // the second sweep ran
	stop()
	f.wantInstanceStates(map[string]domain.State{
		"stuck-claim": domain.StateTerminated, "late-release": domain.StateTerminated, "errored": domain.StateTerminated,
		"started-claim": domain.StateClaimed, "long-job": domain.StateTerminated, "fresh": domain.StateReady,
	})
}

// An instance bound to a job it has not started, expiring at its deadline,
// is terminated and its job goes back to its queue in the same change:
// never left assigned to a terminated instance.
func TestExpireSendsAnUnstartedJobBackToItsQueue(t *testing.T) {
	f := newFixture(t)
	f.CreateInstance(domain.Instance{ID: "bp-1", CloudID: "i-1", State: domain.StateClaimed, Job: "7", RunnerName: "bp-1-7",
		Deadline: f.Clock.Now().Add(time.Minute)})
	f.CreateJob(domain.Job{ID: 7, Status: domain.JobAssigned, Route: domain.RouteLaunch,
		InstanceID: "bp-1", RunnerName: "bp-1-7", Attempts: 1})
	f.Clock.Advance(time.Minute)
	if n, err := f.term.Expire(f.Ctx); err != nil || n != 1 {
		t.Fatalf("expire: %d marked, %v; want 1", n, err)
	}
	in, j := f.Instance("bp-1"), f.Job(7)
	if in.State != domain.StateTerminating || in.Job != "" {
		t.Fatalf("instance %s bound to %q, want terminating, unbound", in.State, in.Job)
	}
	if j.Status != domain.JobQueued || j.InstanceID != "" || j.Attempts != 2 || j.SendPending {
		t.Fatalf("job %s on %q attempt %d pending %t, want queued again, its message sent", j.Status, j.InstanceID, j.Attempts, j.SendPending)
	}
	f.Clock.Advance(domain.MaxQueueDelay)
	if msgs := f.Peek(domain.QueueLaunch, 10); len(msgs) != 1 {
		t.Fatalf("launch queue: %d messages; want the job once", len(msgs))
	}
}

// A terminator starting after an outage holds the deadlines that passed
// while agents could not report (a claim, a release) for its agent grace
// and the agents' longest backoff, as long as the reconciler waits before
// it judges an agent silent, then expires what is still stuck; a launch
// that never recorded its machine is closed at once.
func TestARestartedTerminatorGivesAgentsTimeToReport(t *testing.T) {
	f := newFixture(t)
	due := f.Clock.Now().Add(time.Minute)
	f.CreateInstance(domain.Instance{ID: "claim", State: domain.StateClaimed, Deadline: due})
	f.CreateInstance(domain.Instance{ID: "release", State: domain.StateReleasing, Deadline: due})
	f.CreateInstance(domain.Instance{ID: "launch", State: domain.StatePending, Deadline: due})
	f.Clock.Advance(time.Hour) // the control plane is down meanwhile
	term := &Terminator{Store: f.Store, Queue: f.Queue, Cloud: f.cloud, Clock: f.Clock, Log: f.Log, AgentGrace: 3 * time.Minute}
	if err := term.Init(nil); err != nil {
		t.Fatal(err)
	}
	if n, err := term.Expire(f.Ctx); err != nil || n != 1 || f.Instance("launch").State != domain.StateTerminating {
		t.Fatalf("at the restart: %d marked (%v), launch %s; want only the unrecorded launch", n, err, f.Instance("launch").State)
	}
	for range 2 { // sweeps, far apart here, as a 5 s loop's would not be
		f.Clock.Advance(time.Minute)
		if _, err := term.Expire(f.Ctx); err != nil {
			t.Fatal(err)
		}
	}
	f.Clock.Advance(time.Minute)
	if n, err := term.Expire(f.Ctx); err != nil || n != 0 {
		t.Fatalf("at the end of the agent grace: %d marked (%v), want none while an agent may be waiting out its backoff", n, err)
	}
	f.Clock.Advance(domain.AgentBackoffMax)
	if n, err := term.Expire(f.Ctx); err != nil || n != 2 {
		t.Fatalf("after the grace: %d marked (%v), want the claim and the release still stuck", n, err)
	}
}
