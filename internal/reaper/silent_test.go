package reaper

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
)

// keptLine is what the reaper logs once when it keeps a silent instance.
const keptLine = "agent silent, its job still runs; kept"

// busyInstance records instance id running job g (started) on a machine the
// cloud lists running, its agent heard from now, until deadline (an hour
// away when zero), and returns its machine. The job is 7 when g is zero:
// one GitHub does not know.
func (x *fixture) busyInstance(id string, g domain.GitHubJob, deadline time.Time) domain.CloudInstance {
	x.T.Helper()
	if g.ID == 0 {
		g.ID = 7
	}
	m := x.machine(map[string]string{domain.TagController: "ctl"})
	x.CreateJob(domain.Job{ID: g.ID, RunID: g.RunID, Repo: spotRepo, Status: domain.JobQueued, Route: domain.RoutePool, Pool: "p"})
	x.CreateInstance(domain.Instance{ID: id, CloudID: m.ID, State: domain.StateRunning, Job: domain.JobKey(g.ID), JobStarted: true,
		RunnerName: id, Deadline: deadline})
	if _, err := x.Store.TransitionJob(x.Ctx, g.ID, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) {
		j.Status, j.InstanceID, j.StartedAt = domain.JobRunning, id, x.Clock.Now()
	}); err != nil {
		x.T.Fatal(err)
	}
	return m
}

// logTo has the reconciler log to a buffer it returns.
func (x *fixture) logTo() *bytes.Buffer {
	var logs bytes.Buffer
	x.r.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return &logs
}

// A network cut between the machines and the control plane (a load
// balancer, a security group, DNS) silences every agent while their jobs
// run on: an instance whose job started, on a machine the cloud lists
// running, whose job GitHub has in progress, is kept for as long as it
// lasts, logged and counted once, with GitHub asked about its job now and
// then, not every cycle. Heard again and silent again, it is logged again.
func TestASilentAgentWhoseJobRunsIsKept(t *testing.T) {
	x := newFixture(t)
	x.busyInstance("bp-1", x.githubRunning(0), time.Time{})
	logs := x.logTo()
	for range 3 {
		x.heard("bp-1")
		x.Clock.Advance(time.Minute)
		x.cycle()
	}
	const cut = 20
	for range cut {
		x.Clock.Advance(time.Minute)
		if rep := x.cycle(); rep.Silent != 0 {
			t.Fatalf("at %s into the cut, a busy instance was terminated for its silence: %+v", x.Clock.Now().Sub(t0), rep)
		}
	}
	if in := x.Instance("bp-1"); in.State != domain.StateRunning {
		t.Fatalf("the busy instance is %s (%s), want running", in.State, in.Reason)
	}
	if got := x.actions("silent_kept"); got != 1 {
		t.Errorf("silent_kept counted %v times, want 1", got)
	}
	if n := strings.Count(logs.String(), keptLine); n != 1 {
		t.Errorf("keeping logged %d times, want once:\n%s", n, logs)
	}
	if n := x.getJobCalls(); n == 0 || n > 1+cut/int(silentLookupEvery/time.Minute) {
		t.Errorf("GitHub asked %d times about the job in a %d-minute cut, want now and then", n, cut)
	}
	for range 3 { // the cut ends
		x.heard("bp-1")
		x.Clock.Advance(time.Minute)
		x.cycle()
	}
	if !strings.Contains(logs.String(), "heard again") {
		t.Errorf("the agent heard again is not logged:\n%s", logs)
	}
	for range 5 { // cut again
		x.Clock.Advance(time.Minute)
		x.cycle()
	}
	if n := strings.Count(logs.String(), keptLine); n != 2 || x.actions("silent_kept") != 2 {
		t.Errorf("a second silence logged %d times, counted %v, want 2 of each", n, x.actions("silent_kept"))
	}
	x.wantInstanceStates(map[string]domain.State{"bp-1": domain.StateRunning})
}

// A silent instance whose job started is terminated as soon as something
// else says its job cannot be running there: its machine is not running,
// the store has its job over, or GitHub no longer has it. The job stays
// bound to it, for its completion to find.
func TestASilentBusyInstanceIsTerminatedWhenItsJobCannotRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		github bool // whether GitHub is asked
		reason string
		setup  func(x *fixture, m domain.CloudInstance)
	}{
		{name: "machine stopped", reason: "its machine is stopped", setup: func(x *fixture, m domain.CloudInstance) {
			if err := x.cloud.Stop(x.Ctx, []string{m.ID}); err != nil {
				x.T.Fatal(err)
			}
		}},
		{name: "job over", reason: "its job is completed", setup: func(x *fixture, _ domain.CloudInstance) {
			if _, err := x.Store.TransitionJob(x.Ctx, 7, domain.JobGuard{Status: domain.JobRunning}, func(j *domain.Job) {
				j.Status, j.CompletedAt = domain.JobCompleted, x.Clock.Now()
			}); err != nil {
				x.T.Fatal(err)
			}
		}},
		{name: "job unknown to GitHub", github: true, reason: "GitHub no longer has its job", setup: func(*fixture, domain.CloudInstance) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t)
			m := x.busyInstance("bp-1", domain.GitHubJob{}, time.Time{})
			tc.setup(x, m)
			logs := x.logTo()
			x.Clock.Advance(x.r.SilentAfter)
			if rep := x.cycle(); rep.Silent != 1 || rep.SilentKept != 0 {
				t.Fatalf("report %+v, want the instance terminated at once", rep)
			}
			in := x.Instance("bp-1")
			if in.State != domain.StateTerminating || in.Job != "7" || !in.JobStarted || !strings.Contains(in.Reason, "silent") || !strings.Contains(in.Reason, tc.reason) {
				t.Fatalf("instance is %s, job %q (started %t), reason %q; want terminating with its job, for %q", in.State, in.Job, in.JobStarted, in.Reason, tc.reason)
			}
			if asked := x.getJobCalls() > 0; asked != tc.github {
				t.Errorf("GitHub asked: %t, want %t", asked, tc.github)
			}
			if strings.Contains(logs.String(), keptLine) {
				t.Errorf("an instance terminated was logged as kept:\n%s", logs)
			}
		})
	}
}

// A machine that hung mid-job (the cloud still lists it running) is
// terminated once GitHub has failed the job for the runner it lost, and
// its runner, no longer held, is then deregistered: nothing waits for the
// running deadline. The clock is passed: GitHub notices the dead runner
// in a timer's callback.
func TestASilentInstanceIsTerminatedOnceGitHubFailsItsJob(t *testing.T) {
	const offlineAfter = 10 * time.Minute
	x := newFixture(t)
	g := x.githubRunning(offlineAfter)
	x.busyInstance("bp-1", g, time.Time{})
	for x.Clock.Now().Before(t0.Add(offlineAfter)) {
		x.Clock.Pass(time.Minute)
		if rep := x.cycle(); rep.Silent != 0 {
			t.Fatalf("terminated at %s, while GitHub had the job in progress: %+v", x.Clock.Now().Sub(t0), rep)
		}
	}
	deadline := x.Clock.Now().Add(silentLookupEvery + time.Minute)
	for x.Instance("bp-1").State == domain.StateRunning {
		if x.Clock.Now().After(deadline) {
			t.Fatalf("still running %s after GitHub failed its job", x.Clock.Now().Sub(t0.Add(offlineAfter)))
		}
		x.Clock.Pass(time.Minute)
		x.cycle()
	}
	if in := x.Instance("bp-1"); in.State != domain.StateTerminating || !strings.Contains(in.Reason, "GitHub reports its job completed") {
		t.Fatalf("instance is %s for %q", in.State, in.Reason)
	}
	x.Clock.Pass(time.Minute)
	if rep := x.cycle(); rep.DeadRunners != 1 {
		t.Fatalf("the dead runner of the terminated instance is not deregistered: %+v", rep)
	}
}

// A silent busy instance about whose job GitHub gives no answer is kept,
// without failing a cycle, until its running deadline ends it (a deadline
// half an hour away stands for the day it is by default).
func TestASilentBusyInstanceGitHubSaysNothingAboutEndsAtItsDeadline(t *testing.T) {
	x := newFixture(t)
	deadline := x.Clock.Now().Add(30 * time.Minute)
	x.busyInstance("bp-1", x.githubRunning(0), deadline)
	x.gh.FailNext(ghsim.OpGetJob, 1_000_000, errors.New("GitHub is down"))
	for x.Clock.Now().Add(time.Minute).Before(deadline) {
		x.Clock.Advance(time.Minute)
		if _, err := x.r.Cycle(x.Ctx); err != nil {
			t.Fatalf("GitHub's failure to answer failed the cycle: %v", err)
		}
		if n, err := x.term.Expire(x.Ctx); err != nil || n != 0 {
			t.Fatalf("the terminator marked %d rows before the deadline (%v)", n, err)
		}
	}
	x.wantInstanceStates(map[string]domain.State{"bp-1": domain.StateRunning})
	if n := x.getJobCalls(); n == 0 {
		t.Fatal("GitHub was never asked about the job")
	}
	x.Clock.AdvanceTo(deadline)
	if n, err := x.term.Expire(x.Ctx); err != nil || n != 1 {
		t.Fatalf("the terminator marked %d rows at the running deadline (%v), want 1", n, err)
	}
	x.wantInstanceStates(map[string]domain.State{"bp-1": domain.StateTerminating})
}

// However many agents fall silent at once, a cycle asks GitHub about at
// most silentPerCycle of their jobs; the others are asked about in the
// next cycles.
func TestSilentBusyInstancesAreAskedAboutWithinACap(t *testing.T) {
	x := newFixture(t)
	for i := range silentPerCycle + 1 {
		x.busyInstance(fmt.Sprintf("bp-%d", i), domain.GitHubJob{ID: int64(100 + i)}, time.Time{})
	}
	x.Clock.Advance(x.r.SilentAfter)
	rep := x.cycle()
	if n := x.getJobCalls(); n != silentPerCycle || rep.Silent != silentPerCycle || rep.SilentKept != 1 {
		t.Fatalf("GitHub asked %d times; report %+v; want %d asked and terminated, 1 kept", n, rep, silentPerCycle)
	}
	x.Clock.Advance(time.Minute)
	if rep := x.cycle(); x.getJobCalls() != silentPerCycle+1 || rep.Silent != 1 {
		t.Fatalf("the one left was not asked about next: %d calls, report %+v", x.getJobCalls(), rep)
	}
}
