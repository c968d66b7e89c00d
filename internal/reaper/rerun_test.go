package reaper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
)

const spotRepo = "acme/app"

// spotJob is a job of its own run in the simulated GitHub, taken by a
// runner whose machine is then taken back (the runner dies) unless running
// says it goes on; GitHub fails the job of a dead runner at once. The store
// holds the job as the control plane recorded it: status, interrupted,
// retry. more adds a second, queued job to the run, so the run stays in
// progress. finished has the job run to its end (a success) on its machine
// before the store records it, as one may on a machine that runs on until
// its interruption notice's time.
type spotJob struct {
	running     bool
	finished    bool
	more        bool
	status      domain.JobStatus
	interrupted bool
	retry       string
}

func (x *fixture) spotJob(s spotJob) domain.GitHubJob {
	x.T.Helper()
	// Labels of its own: a re-run of an earlier job must not take its runner.
	labels := []string{"spot", x.T.Name(), fmt.Sprint(len(x.gh.Jobs()))}
	lasts := time.Hour
	if s.finished {
		lasts = time.Minute
	}
	g := x.gh.QueueJob(ghsim.JobSpec{Repo: spotRepo, Labels: labels, Duration: lasts})
	reg, err := x.gh.RegisterRunner(x.Ctx, domain.Scope{Owner: "acme", Repo: "app"}, "bp-"+x.T.Name(), labels)
	if err != nil {
		x.T.Fatal(err)
	}
	if err := x.gh.RunJIT(x.Ctx, reg.JITConfig, nil, nil); err != nil {
		x.T.Fatal(err)
	}
	switch {
	case s.finished:
		x.Clock.Advance(lasts)
		x.Clock.Settle()
	case !s.running && !x.gh.Kill(reg.RunnerID):
		x.T.Fatal("no runner process to kill")
	}
	if s.more {
		x.gh.QueueJob(ghsim.JobSpec{Repo: spotRepo, RunID: g.RunID, Labels: []string{"linux"}})
	}
	j := domain.Job{ID: g.ID, RunID: g.RunID, Repo: spotRepo, Name: g.Name, Status: s.status, Route: domain.RouteLaunch,
		Interrupted: s.interrupted, Spec: domain.RunnerSpec{Name: "spot", Spot: "price-capacity-optimized", Retry: s.retry}}
	x.createJobs(j)
	return g
}

// reruns is how many times GitHub was asked to re-run a job.
func (x *fixture) reruns() int { return x.gh.Calls()[ghsim.OpRerunJob] }

// attempts lists the jobs of a run in GitHub: a re-run adds one.
func (x *fixture) attempts(runID int64) int {
	n := 0
	for _, j := range x.gh.Jobs() {
		if j.RunID == runID {
			n++
		}
	}
	return n
}

// An interrupted job is re-run once its run completed, when its runner
// allows it; GitHub is not even asked while the job itself has not ended,
// nor for a job that was not interrupted.
func TestInterruptedJobIsRerunOnlyOnceItsRunCompleted(t *testing.T) {
	interrupted := spotJob{status: domain.JobRunning, interrupted: true}
	for _, tc := range []struct {
		name   string
		job    spotJob
		age    time.Duration // how long ago the job was recorded
		asked  int           // RerunJob calls
		rerun  bool
		marked bool // recorded as re-run
	}{
		{"run completed", interrupted, 0, 1, true, true},
		{"run completed, bullpen saw the job complete", spotJob{status: domain.JobCompleted, interrupted: true}, 0, 1, true, true},
		{"job still running on GitHub", spotJob{running: true, status: domain.JobRunning, interrupted: true}, 0, 0, false, false},
		{"run in progress", spotJob{more: true, status: domain.JobCompleted, interrupted: true}, 0, 1, false, false},
		{"retry false", spotJob{status: domain.JobCompleted, interrupted: true, retry: domain.RetryNever}, 0, 0, false, false},
		{"not interrupted", spotJob{status: domain.JobCompleted}, 0, 0, false, false},
		{"interrupted more than a day ago", interrupted, domain.RerunWithin, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t)
			g := x.spotJob(tc.job)
			x.Clock.Advance(tc.age)
			rep := x.cycle()
			if got := x.reruns(); got != tc.asked {
				t.Fatalf("GitHub asked to re-run %d times, want %d", got, tc.asked)
			}
			if rerun := x.attempts(g.RunID) > 1+btoi(tc.job.more); rerun != tc.rerun || (rep.Rerun == 1) != tc.rerun {
				t.Fatalf("re-run %t (reported %d), want %t", rerun, rep.Rerun, tc.rerun)
			}
			if j, _ := x.Store.GetJob(x.Ctx, g.ID); j.Rerun != tc.marked || j.Interrupted != tc.job.interrupted {
				t.Fatalf("job recorded re-run %t (interrupted %t), want %t", j.Rerun, j.Interrupted, tc.marked)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Asked each cycle while its run goes on, a job is re-run when the run
// completes, and never again: not on later cycles, not once the re-run
// itself has completed.
func TestInterruptedJobIsRerunOnce(t *testing.T) {
	x := newFixture(t)
	g := x.spotJob(spotJob{more: true, status: domain.JobCompleted, interrupted: true})
	for range 3 {
		if rep := x.cycle(); rep.Rerun != 0 {
			t.Fatal("re-run while its run was in progress")
		}
		x.Clock.Advance(time.Minute)
	}
	if got := x.reruns(); got != 3 {
		t.Fatalf("asked %d times while the run was in progress, want each cycle", got)
	}
	if err := x.gh.CancelRun(x.Ctx, spotRepo, g.RunID); err != nil {
		t.Fatal(err)
	}
	if rep := x.cycle(); rep.Rerun != 1 {
		t.Fatalf("re-ran %d jobs once the run completed, want 1", rep.Rerun)
	}
	if err := x.gh.CancelRun(x.Ctx, spotRepo, g.RunID); err != nil { // the re-run ends too
		t.Fatal(err)
	}
	for range 3 {
		if rep := x.cycle(); rep.Rerun != 0 {
			t.Fatal("re-run twice")
		}
	}
	if got, runJobs := x.reruns(), x.attempts(g.RunID); got != 4 || runJobs != 3 {
		t.Fatalf("asked %d times, run has %d jobs; want 4 and the two jobs with one re-run", got, runJobs)
	}
}

// GitHub's answers: a job it no longer has is settled (never asked again),
// a failure is an error of the cycle and tried again the next.
func TestRerunWhenGitHubFails(t *testing.T) {
	x := newFixture(t)
	g := x.spotJob(spotJob{status: domain.JobCompleted, interrupted: true})
	x.gh.FailNext(ghsim.OpRerunJob, 1, nil)
	if _, err := x.r.Cycle(x.Ctx); !errors.Is(err, ghsim.ErrInjected) {
		t.Fatalf("cycle: %v, want the failure", err)
	}
	if j, _ := x.Store.GetJob(x.Ctx, g.ID); j.Rerun {
		t.Fatal("a failed re-run stays recorded")
	}
	if rep := x.cycle(); rep.Rerun != 1 {
		t.Fatalf("re-ran %d jobs after the failure passed, want 1", rep.Rerun)
	}

	gone := x.spotJob(spotJob{status: domain.JobCompleted, interrupted: true})
	x.gh.FailNext(ghsim.OpRerunJob, 1, domain.ErrNotFound)
	before := x.reruns()
	for range 2 {
		if rep := x.cycle(); rep.Rerun != 0 {
			t.Fatal("a job GitHub does not have was counted as re-run")
		}
	}
	if got := x.reruns() - before; got != 1 {
		t.Fatalf("asked %d times for a job GitHub does not have, want once", got)
	}
	if j, _ := x.Store.GetJob(x.Ctx, gone.ID); !j.Rerun {
		t.Fatal("a job GitHub does not have is not settled")
	}
}

// Reapers of several control planes on one store: one asks.
func TestConcurrentReapersRerunOnce(t *testing.T) {
	x := newFixture(t)
	g := x.spotJob(spotJob{status: domain.JobCompleted, interrupted: true})
	var wg sync.WaitGroup
	for range 4 {
		other := x.reconciler()
		wg.Go(func() {
			if _, err := other.rerunInterrupted(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got, runJobs := x.reruns(), x.attempts(g.RunID); got != 1 || runJobs != 2 {
		t.Fatalf("asked %d times, run has %d jobs; want one re-run", got, runJobs)
	}
}

// A job whose spot machine was taken back just as it succeeded (GitHub's
// conclusion came after the interruption) is not run again: a deploy must
// not run twice. One GitHub concluded as a failure is.
func TestAnInterruptedJobThatSucceededIsNotRerun(t *testing.T) {
	x := newFixture(t)
	spec := domain.RunnerSpec{Name: "spot", Spot: "price-capacity-optimized"}
	x.createJobs(domain.Job{ID: 901, RunID: 91, Repo: spotRepo, Status: domain.JobCompleted, Conclusion: "success", Interrupted: true, Route: domain.RouteLaunch, Spec: spec})
	for range 2 {
		if rep := x.cycle(); rep.Rerun != 0 {
			t.Fatalf("re-ran a job GitHub concluded as a success: %+v", rep)
		}
	}
	if got := x.reruns(); got != 0 {
		t.Fatalf("asked GitHub %d times to re-run a succeeded job", got)
	}
}

// A job whose machine's interruption notice came while it ran may still
// finish there, and its agent's report completes it before GitHub's
// conclusion is known. GitHub is asked: one that succeeded is not run
// again, one that failed is. The conclusion is recorded, so that GitHub is
// asked about the job once.
func TestAnInterruptedJobCompletedByItsAgentIsRerunOnlyIfGitHubFailedIt(t *testing.T) {
	for _, tc := range []struct {
		name       string
		job        spotJob
		conclusion string
		asked      int // RerunJob calls
	}{
		{"it succeeded", spotJob{finished: true, status: domain.JobCompleted, interrupted: true}, "success", 0},
		{"it failed", spotJob{status: domain.JobCompleted, interrupted: true}, "failure", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t)
			g := x.spotJob(tc.job)
			if gj, err := x.gh.GetJob(x.Ctx, spotRepo, g.ID); err != nil || gj.Conclusion != tc.conclusion {
				t.Fatalf("GitHub has the job %+v (%v), want it concluded %s", gj, err, tc.conclusion)
			}
			lookups := x.getJobCalls()
			for range 3 {
				x.cycle()
				x.Clock.Advance(time.Minute)
			}
			if got := x.reruns(); got != tc.asked {
				t.Fatalf("GitHub asked to re-run %d times, want %d", got, tc.asked)
			}
			if got := x.getJobCalls() - lookups; got != 1 {
				t.Errorf("GitHub asked about the job %d times, want once", got)
			}
			if j, _ := x.Store.GetJob(x.Ctx, g.ID); j.Conclusion != tc.conclusion || j.Rerun != (tc.asked == 1) {
				t.Errorf("job recorded concluded %q, re-run %t; want %q, %t", j.Conclusion, j.Rerun, tc.conclusion, tc.asked == 1)
			}
		})
	}
}
