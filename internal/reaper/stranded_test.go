package reaper

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// strandedJob records GitHub job g running on instance bp-1 (see
// busyInstance: job 7, which GitHub does not know, when g is zero), whose
// machine the cloud then loses, and returns the job's id. The completed webhook that would end the job never comes: nothing
// delivers the simulated GitHub's webhooks.
func (x *fixture) strandedJob(g domain.GitHubJob) int64 {
	x.T.Helper()
	m := x.busyInstance("bp-1", g, time.Time{})
	if err := x.cloud.Terminate(x.Ctx, []string{m.ID}); err != nil {
		x.T.Fatal(err)
	}
	id, err := domain.ParseJobKey(x.Instance("bp-1").Job)
	if err != nil {
		x.T.Fatal(err)
	}
	return id
}

// cycleUntilGitHubIsAsked runs a cycle a minute for five minutes and fails
// the test if GitHub was asked about a job before the fifth: until then
// the job's completed webhook may still come.
func (x *fixture) cycleUntilGitHubIsAsked() {
	x.T.Helper()
	for range 4 {
		x.Clock.Pass(time.Minute)
		x.cycle()
	}
	if n := x.getJobCalls(); n != 0 {
		x.T.Fatalf("GitHub asked %d times about a job whose webhook may still come", n)
	}
	x.Clock.Pass(time.Minute)
	x.cycle()
}

// githubRunning has GitHub run a job for a day on a runner whose process
// dies; GitHub notices after offlineAfter and fails the job (never, when
// offlineAfter is zero: the runner goes on).
func (x *fixture) githubRunning(offlineAfter time.Duration) domain.GitHubJob {
	x.T.Helper()
	x.gh = ghsim.New(x.Clock, ghsim.Options{OfflineAfter: offlineAfter})
	x.r = x.reconciler()
	labels := []string{"runs-on=1"}
	g := x.gh.QueueJob(ghsim.JobSpec{Repo: spotRepo, Labels: labels, Duration: 24 * time.Hour})
	reg, err := x.gh.RegisterRunner(x.Ctx, scope, "bp-1", labels)
	if err != nil {
		x.T.Fatal(err)
	}
	if err := x.gh.RunJIT(x.Ctx, reg.JITConfig, nil, nil); err != nil {
		x.T.Fatal(err)
	}
	if offlineAfter > 0 && !x.gh.Kill(reg.RunnerID) {
		x.T.Fatal("no runner process to kill")
	}
	return g
}

// wantCompletedAsGitHubReports checks that job id is completed with the
// conclusion GitHub has for it, which is conclusion, and without a reason;
// that action was counted once; and that GitHub is not asked about the job
// again once it is over.
func (x *fixture) wantCompletedAsGitHubReports(id int64, conclusion, action string) {
	x.T.Helper()
	want, _ := x.gh.Job(id)
	j := x.Job(id)
	if j.Status != domain.JobCompleted || j.Conclusion != want.Conclusion || want.Conclusion != conclusion || j.Reason != "" {
		x.T.Fatalf("job is %s (%q, reason %q), want completed as GitHub has it (%s %q)", j.Status, j.Conclusion, j.Reason, want.Status, want.Conclusion)
	}
	if got := x.actions(action); got != 1 {
		x.T.Fatalf("%s counted %v times, want 1", action, got)
	}
	calls := x.getJobCalls()
	x.Clock.Pass(time.Hour)
	x.cycle()
	if n := x.getJobCalls(); n != calls {
		x.T.Fatalf("GitHub asked again about a job that is over (%d calls, then %d)", calls, n)
	}
}

func (x *fixture) getJobCalls() int { return x.gh.Calls()[ghsim.OpGetJob] }

func (x *fixture) actions(kind string) float64 {
	return testutil.ToFloat64(x.r.metrics.actions.WithLabelValues(kind))
}

// A started job whose machine vanished, and whose completed webhook was
// lost, is completed as GitHub reports it once GitHub has failed it: not
// before its row was closed and a few minutes passed, and without asking
// GitHub again once it is over. The clock is passed, not advanced: GitHub
// notices the dead runner in a timer's callback, whose effects must settle
// before the reaper asks.
func TestStartedJobOnAVanishedMachineIsCompletedAsGitHubReports(t *testing.T) {
	x := newFixture(t)
	g := x.githubRunning(20 * time.Minute)
	id := x.strandedJob(g)
	x.Clock.Pass(2 * time.Minute)
	if rep := x.cycle(); rep.Gone != 1 || x.Instance("bp-1").State != domain.StateTerminated {
		t.Fatalf("the row of the vanished machine is not closed: %+v", rep)
	}
	x.cycleUntilGitHubIsAsked()
	if n := x.getJobCalls(); n != 1 {
		t.Fatalf("GitHub asked %d times about a stranded job, want 1", n)
	}
	if j := x.Job(id); j.Status != domain.JobRunning {
		t.Fatalf("job is %s while GitHub has it in progress", j.Status)
	}
	for range 15 {
		x.Clock.Pass(time.Minute)
		x.cycle()
	}
	x.wantCompletedAsGitHubReports(id, ghsim.ConclusionFailure, "completed_job")
}

// A stranded job GitHub still reports in progress is left running, for
// days: GitHub alone knows it has not ended.
func TestStrandedJobGitHubReportsInProgressStaysRunning(t *testing.T) {
	x := newFixture(t)
	id := x.strandedJob(x.githubRunning(0))
	for range 5 {
		x.Clock.Advance(time.Hour)
		x.cycle()
	}
	if j := x.Job(id); j.Status != domain.JobRunning {
		t.Fatalf("job is %s while GitHub has it in progress", j.Status)
	}
	if n := x.getJobCalls(); n == 0 {
		t.Fatal("GitHub never asked about the stranded job")
	}
}

// A stranded job GitHub does not have (its repository deleted, say) is
// given up with a reason, and without a conclusion, which GitHub's late
// completed webhook would still give it.
func TestStrandedJobGitHubDoesNotHaveIsGivenUp(t *testing.T) {
	x := newFixture(t)
	id := x.strandedJob(domain.GitHubJob{ID: 7}) // an id GitHub does not know
	for range 5 {
		x.Clock.Advance(24 * time.Hour)
		x.cycle()
	}
	j, err := x.Store.GetJob(x.Ctx, id)
	if err == nil && (j.Status != domain.JobCompleted || j.Conclusion != "" || j.Reason == "") {
		t.Fatalf("job is %s (conclusion %q, reason %q), want completed without a conclusion, with a reason", j.Status, j.Conclusion, j.Reason)
	}
	if got := x.actions("abandoned_job"); got != 1 {
		t.Fatalf("abandoned_job counted %v times, want 1", got)
	}
}

// A stranded job GitHub gives no answer about is asked about again each
// cycle, without failing the cycle, and given up only past the running
// allowance.
func TestStrandedJobWithoutAnswerIsGivenUpPastTheRunningAllowance(t *testing.T) {
	x := newFixture(t)
	id := x.strandedJob(x.githubRunning(0))
	x.gh.FailNext(ghsim.OpGetJob, 1_000_000, errors.New("GitHub is down"))
	for range 23 {
		x.Clock.Advance(time.Hour)
		if _, err := x.r.Cycle(x.Ctx); err != nil {
			t.Fatalf("GitHub's failure to answer about a stranded job failed the cycle: %v", err)
		}
	}
	if j := x.Job(id); j.Status != domain.JobRunning {
		t.Fatalf("job is %s before the running allowance passed", j.Status)
	}
	x.Clock.Advance(time.Hour)
	x.cycle()
	if j := x.Job(id); j.Status != domain.JobCompleted || j.Reason == "" {
		t.Fatalf("job is %s (reason %q) past the running allowance", j.Status, j.Reason)
	}
}

// At most strandedPerCycle stranded jobs are asked about a cycle, those
// asked least lately first: jobs GitHub keeps failing to answer about do
// not starve a newer one.
func TestStrandedJobsAreAskedAboutInTurnWithinACap(t *testing.T) {
	x := newFixture(t)
	var ids []int64
	for i := range strandedPerCycle + 1 {
		id := int64(100 + i)
		x.CreateJob(domain.Job{ID: id, Repo: spotRepo, Status: domain.JobRunning, Route: domain.RoutePool, Pool: "p",
			InstanceID: fmt.Sprintf("bp-deleted-%d", i), StartedAt: x.Clock.Now()})
		ids = append(ids, id)
		x.Clock.Advance(time.Second)
	}
	x.Clock.Advance(strandedAfter)
	x.gh.FailNext(ghsim.OpGetJob, strandedPerCycle, errors.New("GitHub is down"))
	x.cycle()
	if n := x.getJobCalls(); n != strandedPerCycle {
		t.Fatalf("GitHub asked %d times in a cycle, want %d", n, strandedPerCycle)
	}
	x.Clock.Advance(time.Minute)
	x.cycle()
	if n := x.getJobCalls(); n != 2*strandedPerCycle {
		t.Fatalf("GitHub asked %d times in two cycles, want %d", n, 2*strandedPerCycle)
	}
	if j := x.Job(ids[len(ids)-1]); j.Status != domain.JobCompleted {
		t.Fatalf("the newest stranded job, never asked about, is %s after the second cycle", j.Status)
	}
	x.Clock.Advance(time.Minute)
	x.cycle()
	for _, id := range ids {
		if j := x.Job(id); j.Status != domain.JobCompleted {
			t.Fatalf("job %d is %s after three cycles", id, j.Status)
		}
	}
}

// A job whose instance has not ended (it still serves it, or is being
// terminated) is never asked about.
func TestJobOnAnInstanceNotEndedIsNotAskedAbout(t *testing.T) {
	x := newFixture(t)
	m := x.machine(map[string]string{domain.TagController: "ctl"})
	x.CreateInstance(domain.Instance{ID: "bp-1", CloudID: m.ID, State: domain.StateRunning, Job: "7", JobStarted: true, Role: domain.RoleHot})
	x.CreateJob(domain.Job{ID: 7, Repo: spotRepo, Status: domain.JobRunning, Route: domain.RoutePool, Pool: "p", InstanceID: "bp-1"})
	if err := x.cloud.Stop(x.Ctx, []string{m.ID}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		x.Clock.Advance(time.Minute)
		x.cycle() // its agent is silent and its machine stopped: the instance is marked terminating, and no terminator closes it
	}
	if in := x.Instance("bp-1"); in.State != domain.StateTerminating {
		t.Fatalf("the silent instance whose machine stopped is %s, want terminating", in.State)
	}
	if n := x.getJobCalls(); n != 0 {
		t.Fatalf("GitHub asked %d times about a job its instance serves", n)
	}
}

// An agent that came back while its runner ran reports the job it had
// failed, and its instance is in error with the job started and still
// bound. The job's completed webhook is lost: GitHub is asked about it
// once the row has been in error for a few minutes, and the job is
// completed as GitHub reports it, its instance retired in the same change.
func TestStartedJobOfAnInstanceInErrorIsCompletedAsGitHubReports(t *testing.T) {
	x := newFixture(t)
	g := x.githubRunning(time.Minute)
	x.busyInstance("bp-1", g, x.Clock.Now().Add(24*time.Hour))
	if _, ok, err := jobs.Retire(x.Ctx, x.Store, x.Queue, x.Instance("bp-1"), domain.StateError,
		"the agent restarted while its runner ran", x.Clock.Now().Add(time.Hour)); err != nil || !ok {
		t.Fatalf("retire to error: %t, %v", ok, err)
	}
	x.cycleUntilGitHubIsAsked()
	in := x.Instance("bp-1")
	if in.State != domain.StateTerminating || in.Job != domain.JobKey(g.ID) || !strings.Contains(in.Reason, "GitHub reports its job completed") {
		t.Fatalf("instance is %s bound to %q for %q, want terminating as GitHub reports its job completed", in.State, in.Job, in.Reason)
	}
	x.wantCompletedAsGitHubReports(g.ID, ghsim.ConclusionFailure, "completed_job")
}

// A machine launched for a job whose runner GitHub saw take it (the
// instance is booting, its job started) and whose agent then hangs: past
// the row's own deadline its job is asked about, completed as GitHub
// reports it, and the instance retired in the same change, long before
// its backstop at the running deadline. A row claimed likewise, whose
// agent still beats (so that it is not silent), is judged the same.
func TestStartedJobOfAnInstanceStuckBootingIsCompletedAsGitHubReports(t *testing.T) {
	for _, state := range []domain.State{domain.StateBooting, domain.StateClaimed} {
		t.Run(string(state), func(t *testing.T) {
			x := newFixture(t)
			g := x.githubRunning(time.Minute)
			m := x.machine(map[string]string{domain.TagController: "ctl"})
			due := x.Clock.Now().Add(10 * time.Minute)
			x.CreateJob(domain.Job{ID: g.ID, RunID: g.RunID, Repo: spotRepo, Status: domain.JobRunning, Route: domain.RouteLaunch,
				InstanceID: "bp-1", StartedAt: x.Clock.Now()})
			x.CreateInstance(domain.Instance{ID: "bp-1", CloudID: m.ID, State: state, Role: domain.RoleOnDemand, Job: domain.JobKey(g.ID),
				JobStarted: true, RunnerName: "bp-1", RunnerConfig: "jit", Deadline: due})
			for x.Clock.Now().Before(due.Add(strandedAfter - time.Minute)) {
				x.heard("bp-1") // an agent hung in its runner's start may still beat
				x.Clock.Pass(time.Minute)
				x.cycle()
			}
			if in := x.Instance("bp-1"); in.State != state || x.getJobCalls() != 0 {
				t.Fatalf("before its deadline and the stranded wait: instance %s, GitHub asked %d times; want it left alone", in.State, x.getJobCalls())
			}
			x.Clock.Pass(time.Minute)
			x.cycle()
			if in := x.Instance("bp-1"); in.State != domain.StateTerminating || in.Job != domain.JobKey(g.ID) {
				t.Fatalf("instance is %s bound to %q, want terminating, its job still bound for its completion", in.State, in.Job)
			}
			x.wantCompletedAsGitHubReports(g.ID, ghsim.ConclusionFailure, "completed_job")
		})
	}
}
