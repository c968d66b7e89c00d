package reaper

import (
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
)

// waitingJob records GitHub job g (an id GitHub does not know when g is
// zero) as queued since now, in pool p.
func (x *fixture) waitingJob(id int64, g domain.GitHubJob) int64 {
	x.T.Helper()
	if g.ID != 0 {
		id = g.ID
	}
	x.CreateJob(domain.Job{ID: id, RunID: g.RunID, Repo: spotRepo, Labels: g.Labels, Status: domain.JobQueued, Route: domain.RoutePool, Pool: "p",
		QueuedAt: x.Clock.Now()})
	return id
}

// A job cancelled on GitHub while the runner registered for it waited,
// whose completed webhook was lost, is completed as GitHub reports it once
// it has waited waitingAfter, and its instance, kept alive by its agent, is
// retired in the same change: without that the instance's expiry would
// send the job back to its queue, and the next instance would hold it as
// long, for good.
func TestAJobCancelledBeforeItStartedIsCompletedAndItsInstanceRetired(t *testing.T) {
	x := newFixture(t)
	labels := []string{"runs-on=1/pool=p"}
	g := x.gh.QueueJob(ghsim.JobSpec{Repo: spotRepo, Labels: labels, Duration: time.Minute})
	reg, err := x.gh.RegisterRunner(x.Ctx, scope, "bp-1-x", labels)
	if err != nil {
		t.Fatal(err)
	}
	m := x.machine(map[string]string{domain.TagController: "ctl"})
	id := x.waitingJob(0, g)
	x.CreateInstance(domain.Instance{ID: "bp-1", CloudID: m.ID, State: domain.StateRunning, Job: domain.JobKey(id), Role: domain.RoleHot,
		RunnerName: reg.Name, Deadline: x.Clock.Now().Add(24 * time.Hour)})
	x.assign(id, "bp-1")
	if err := x.gh.CancelRun(x.Ctx, spotRepo, g.RunID); err != nil {
		t.Fatal(err)
	}
	for range 9 {
		x.Clock.Advance(time.Minute)
		x.heard("bp-1")
		x.cycle()
	}
	if n := x.getJobCalls(); n != 0 {
		t.Fatalf("GitHub asked %d times about a job waiting less than %s", n, waitingAfter)
	}
	x.Clock.Advance(time.Minute)
	x.heard("bp-1")
	if rep := x.cycle(); rep.CompletedWaiting != 1 {
		t.Fatalf("report %+v", rep)
	}
	if in := x.Instance("bp-1"); in.State != domain.StateTerminating || in.Job != "" || in.Reason == "" {
		t.Fatalf("its instance is %s (job %q, reason %q), want terminating, unbound, with a reason", in.State, in.Job, in.Reason)
	}
	x.wantCompletedAsGitHubReports(id, ghsim.ConclusionCancelled, "completed_waiting_job")
}

// A queued job GitHub does not have (its repository deleted, say) is given
// up with a reason, and without a conclusion.
func TestAWaitingJobGitHubDoesNotHaveIsGivenUp(t *testing.T) {
	x := newFixture(t)
	id := x.waitingJob(7, domain.GitHubJob{})
	x.Clock.Advance(waitingAfter)
	if rep := x.cycle(); rep.AbandonedWaiting != 1 {
		t.Fatalf("report %+v", rep)
	}
	if j := x.Job(id); j.Status != domain.JobCompleted || j.Conclusion != "" || j.Reason == "" {
		t.Fatalf("job is %s (conclusion %q, reason %q), want completed without a conclusion, with a reason", j.Status, j.Conclusion, j.Reason)
	}
	if got := x.actions("abandoned_waiting_job"); got != 1 {
		t.Fatalf("abandoned_waiting_job counted %v times, want 1", got)
	}
}

// A job GitHub lists queued each cycle costs no look-up, however long it
// waits; neither does one GitHub holds for an approval, which waits for a
// person.
func TestJobsGitHubListsQueuedOrHoldsForApprovalAreNotAskedAbout(t *testing.T) {
	x := newFixture(t)
	queued := x.waitingJob(0, x.gh.QueueJob(ghsim.JobSpec{Repo: spotRepo, Labels: []string{"runs-on=1/pool=p"}}))
	x.CreateJob(domain.Job{ID: 8, Repo: spotRepo, Status: domain.JobQueued, Route: domain.RoutePool, Pool: "p",
		QueuedAt: x.Clock.Now(), Reason: domain.ReasonWaitingForApproval})
	for range 60 {
		x.Clock.Advance(time.Minute)
		x.cycle()
	}
	if n := x.getJobCalls(); n != 0 {
		t.Fatalf("GitHub asked %d times about jobs it lists queued or holds for approval", n)
	}
	for _, id := range []int64{queued, 8} {
		if j := x.Job(id); j.Status != domain.JobQueued {
			t.Fatalf("job %d is %s", id, j.Status)
		}
	}
}

// At most waitingPerCycle waiting jobs are looked up a cycle, those looked
// up least lately first, and one looked up is not looked up again within
// waitingAfter: jobs GitHub keeps failing to answer about do not starve a
// newer one, nor spend GitHub's budget every cycle.
func TestWaitingJobsAreLookedUpInTurnWithinACap(t *testing.T) {
	x := newFixture(t)
	var ids []int64
	for i := range waitingPerCycle + 1 {
		ids = append(ids, x.waitingJob(int64(100+i), domain.GitHubJob{}))
		x.Clock.Advance(time.Second)
	}
	x.Clock.Advance(waitingAfter)
	x.gh.FailNext(ghsim.OpGetJob, waitingPerCycle, errors.New("GitHub is down"))
	x.cycle()
	if n := x.getJobCalls(); n != waitingPerCycle {
		t.Fatalf("GitHub asked %d times in a cycle, want %d", n, waitingPerCycle)
	}
	x.Clock.Advance(time.Minute)
	x.cycle()
	if n := x.getJobCalls(); n != waitingPerCycle+1 {
		t.Fatalf("GitHub asked %d times in two cycles, want %d", n, waitingPerCycle+1)
	}
	if j := x.Job(ids[len(ids)-1]); j.Status != domain.JobCompleted {
		t.Fatalf("the newest waiting job, never asked about, is %s after the second cycle", j.Status)
	}
	x.Clock.Advance(waitingAfter - 2*time.Minute)
	x.cycle()
	if n := x.getJobCalls(); n != waitingPerCycle+1 {
		t.Fatalf("GitHub asked %d times within %s of its last answers, want %d", n, waitingAfter, waitingPerCycle+1)
	}
	x.Clock.Advance(time.Minute)
	x.cycle()
	for _, id := range ids {
		if j := x.Job(id); j.Status != domain.JobCompleted {
			t.Fatalf("job %d is %s once %s passed since it was asked about", id, j.Status, waitingAfter)
		}
	}
}

// A job whose webhook came late (GitHub queued it an hour before bullpen
// heard of it) has waited for bullpen only since then: it is not looked up
// before it has waited waitingAfter from its record.
func TestAJobHeardOfLateIsLookedUpOnlyAfterWaitingForBullpen(t *testing.T) {
	x := newFixture(t)
	x.CreateJob(domain.Job{ID: 7, Repo: spotRepo, Labels: []string{"runs-on=1/pool=p"}, Status: domain.JobQueued, Route: domain.RoutePool, Pool: "p",
		QueuedAt: x.Clock.Now().Add(-time.Hour)})
	for range 9 {
		x.Clock.Advance(time.Minute)
		x.cycle()
	}
	if n := x.getJobCalls(); n != 0 {
		t.Fatalf("GitHub asked %d times about a job bullpen heard of %s ago", n, 9*time.Minute)
	}
	x.Clock.Advance(time.Minute)
	x.cycle()
	if n := x.getJobCalls(); n != 1 {
		t.Fatalf("GitHub asked %d times once the job waited %s for bullpen, want 1", n, waitingAfter)
	}
}
