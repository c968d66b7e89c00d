package reaper

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/testlog"
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

// A row booting or claimed whose job GitHub saw start outlives its own
// deadline, as the job must not be cut short, but not the running
// deadline counted from when it entered its state: an agent that hung
// there, its job's completed webhook lost, would otherwise keep its
// machine for good. The job stays bound to it, for its completion to find.
func TestExpireEndsAStartedJobsRowStuckOutsideRunningAtTheRunningDeadline(t *testing.T) {
	f := newFixture(t)
	due := f.Clock.Now().Add(10 * time.Minute)
	f.createRows(
		domain.Instance{ID: "booting", State: domain.StateBooting, Job: "1", JobStarted: true, Deadline: due},
		domain.Instance{ID: "claimed", State: domain.StateClaimed, Job: "2", JobStarted: true, Deadline: due},
	)
	running := domain.DefaultDeadlines().Running
	f.Clock.Advance(running - time.Second)
	if n, err := f.term.Expire(f.Ctx); err != nil || n != 0 {
		t.Fatalf("within the running deadline: %d marked (%v), want none", n, err)
	}
	f.wantInstanceStates(map[string]domain.State{"booting": domain.StateBooting, "claimed": domain.StateClaimed})
	f.Clock.Advance(time.Second)
	if n, err := f.term.Expire(f.Ctx); err != nil || n != 2 {
		t.Fatalf("at the running deadline: %d marked (%v), want both", n, err)
	}
	for id, job := range map[string]string{"booting": "1", "claimed": "2"} {
		if in := f.Instance(id); in.State != domain.StateTerminating || in.Job != job || !in.JobStarted {
			t.Errorf("%s is %s bound to %q (started %t), want terminating, still bound to its job %s", id, in.State, in.Job, in.JobStarted, job)
		}
	}
}

// A row in error ends at its own deadline even though its job started:
// its agent said the runner is gone. The job stays bound to it and is
// completed as GitHub reports it once the row is closed.
func TestExpireEndsAnInstanceInErrorWhoseJobStarted(t *testing.T) {
	x := newFixture(t)
	g := x.githubRunning(time.Minute)
	x.busyInstance("bp-1", g, x.Clock.Now().Add(24*time.Hour))
	if _, ok, err := jobs.Retire(x.Ctx, x.Store, x.Queue, x.Instance("bp-1"), domain.StateError,
		"the agent restarted while its runner ran", x.Clock.Now().Add(5*time.Minute)); err != nil || !ok {
		t.Fatalf("retire to error: %t, %v", ok, err)
	}
	x.Clock.Pass(5*time.Minute - time.Second)
	if n, err := x.term.Expire(x.Ctx); err != nil || n != 0 {
		t.Fatalf("before its deadline: %d marked (%v), want none", n, err)
	}
	x.Clock.Pass(time.Second)
	if n, err := x.term.Expire(x.Ctx); err != nil || n != 1 {
		t.Fatalf("at its deadline: %d marked (%v), want the row in error", n, err)
	}
	if in := x.Instance("bp-1"); in.State != domain.StateTerminating || in.Job != domain.JobKey(g.ID) {
		t.Fatalf("instance is %s bound to %q, want terminating, still bound to its job", in.State, in.Job)
	}
	if _, err := x.term.Sweep(x.Ctx); err != nil {
		t.Fatal(err)
	}
	x.wantInstanceStates(map[string]domain.State{"bp-1": domain.StateTerminated})
	for range 6 {
		x.Clock.Pass(time.Minute)
		x.cycle()
	}
	x.wantCompletedAsGitHubReports(g.ID, ghsim.ConclusionFailure, "completed_job")
}

// A release that times out ends at the terminator's sweep, before its
// late agent could report it: it is counted there, by the state the row
// was in, and logged at WARN with its deadline. So is a job cut short at
// the running deadline; a row idle past its deadline is only counted.
func TestExpireCountsAndWarnsOfTimedOutReleasesAndKilledJobs(t *testing.T) {
	f := newFixture(t)
	var log testlog.Buffer
	f.term.Log = slog.New(slog.NewTextHandler(&log, nil))
	if err := f.term.Init(nil); err != nil {
		t.Fatal(err)
	}
	due := f.Clock.Now().Add(time.Minute)
	f.createRows(
		domain.Instance{ID: "release", State: domain.StateReleasing, Deadline: due},
		domain.Instance{ID: "long-job", State: domain.StateRunning, Job: "4", JobStarted: true, Deadline: due},
		domain.Instance{ID: "idle", State: domain.StateReady, Deadline: due},
	)
	f.Clock.Advance(time.Minute)
	if n, err := f.term.Expire(f.Ctx); err != nil || n != 3 {
		t.Fatalf("%d marked (%v), want 3", n, err)
	}
	for state, want := range map[domain.State]float64{domain.StateReleasing: 1, domain.StateRunning: 1, domain.StateReady: 1, domain.StateClaimed: 0} {
		if got := testutil.ToFloat64(f.term.metrics.expired.WithLabelValues(string(state))); got != want {
			t.Errorf("expired in %s counted %v, want %v", state, got, want)
		}
	}
	deadline := "deadline=" + due.Format("2006-01-02T15:04:05.000Z07:00") // as slog writes a time
	if lines := log.Lines("level=WARN", "instance=release", "release timed out", "clean-up did not finish", deadline); len(lines) != 1 {
		t.Errorf("timed-out release: want one WARN naming the deadline and the unfinished clean-up; log:\n%s", log.String())
	}
	if lines := log.Lines("level=WARN", "instance=long-job", "running deadline", deadline); len(lines) != 1 {
		t.Errorf("job killed at the running deadline: want one WARN; log:\n%s", log.String())
	}
	if lines := log.Lines("level=INFO", "instance=idle"); len(lines) != 1 {
		t.Errorf("idle row past its deadline: want one INFO line; log:\n%s", log.String())
	}
}

// An instance taken back by the cloud while it ran a started job runs on
// until the notice's time; ended there, its reason still says it was a
// spot interruption, not that a running deadline passed.
func TestExpireKeepsTheSpotInterruptionInTheReason(t *testing.T) {
	f := newFixture(t)
	in := f.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateRunning, Job: "7", JobStarted: true,
		Deadline: f.Clock.Now().Add(time.Hour)})
	notice := f.Clock.Now().Add(2 * time.Minute)
	leave := domain.Lifecycle{}.Leave(in, "spot interruption: the cloud is taking the machine back", notice)
	if _, err := f.Store.Transition(f.Ctx, leave.ID, leave.Guard, leave.Apply); err != nil {
		t.Fatal(err)
	}
	f.Clock.Advance(2 * time.Minute)
	if n, err := f.term.Expire(f.Ctx); err != nil || n != 1 {
		t.Fatalf("%d marked (%v), want the interrupted instance", n, err)
	}
	got := f.Instance("bp-1")
	if got.State != domain.StateTerminating || !strings.HasPrefix(got.Reason, "spot interruption:") || !strings.Contains(got.Reason, "notice time passed") {
		t.Fatalf("instance is %s for %q, want terminating for its spot interruption's notice time", got.State, got.Reason)
	}
}
