package reaper

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
)

// An interrupted job is re-run once, after its run completed, when its
// runner allows it; never a job that was not interrupted.
func TestInterruptedJobIsRerunOnceItsRunCompleted(t *testing.T) {
	x := newRecon(t)
	var ids []int64
	for _, spec := range []struct {
		interrupted bool
		retry       string
	}{{true, ""}, {true, domain.RetryNever}, {false, ""}} {
		g := x.gh.QueueJob(ghsim.JobSpec{Repo: "acme/app", Labels: []string{"spot"}})
		j := domain.Job{ID: g.ID, RunID: g.RunID, Repo: "acme/app", Status: domain.JobRunning, Route: domain.RouteLaunch,
			Interrupted: spec.interrupted, Spec: domain.RunnerSpec{Name: "spot", Spot: "price-capacity-optimized", Retry: spec.retry}}
		if _, err := x.store.CreateJobs(x.ctx, []domain.Job{j}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, g.ID)
	}
	if rep := x.cycle(); rep.Rerun != 0 {
		t.Fatalf("re-ran %d jobs while their runs were in progress", rep.Rerun)
	}
	for _, id := range ids {
		g, _ := x.gh.GetJob(x.ctx, "acme/app", id)
		if err := x.gh.CancelRun(x.ctx, "acme/app", g.RunID); err != nil {
			t.Fatal(err)
		}
	}
	if rep := x.cycle(); rep.Rerun != 1 {
		t.Fatalf("re-ran %d jobs, want the interrupted one that allows it", rep.Rerun)
	}
	if j, _ := x.store.GetJob(x.ctx, ids[0]); !j.Rerun {
		t.Fatal("the re-run was not recorded")
	}
	if rep := x.cycle(); rep.Rerun != 0 {
		t.Fatalf("re-ran %d jobs again", rep.Rerun)
	}
	attempts := map[int64]int{}
	for _, j := range x.gh.Jobs() {
		attempts[j.RunID]++
	}
	first, _ := x.gh.GetJob(x.ctx, "acme/app", ids[0])
	if attempts[first.RunID] != 2 {
		t.Fatalf("the interrupted job's run has %d jobs, want the job and its re-run", attempts[first.RunID])
	}
}
