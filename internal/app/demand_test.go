package app

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// A pool's demand is its jobs waiting for a runner or running; one GitHub
// holds for an approval waits for a person and starts no machine.
func TestDemandLeavesOutJobsHeldForAnApproval(t *testing.T) {
	a, _ := appOnFile(t, linuxPool)
	job := func(id int64, st domain.JobStatus, reason string) domain.Job {
		return domain.Job{ID: id, Repo: "acme/app", Status: st, Pool: "linux", Labels: []string{"self-hosted"}, Reason: reason}
	}
	jobs := []domain.Job{
		job(1, domain.JobQueued, ""),
		job(2, domain.JobQueued, domain.ReasonWaitingForApproval),
		job(3, domain.JobQueued, domain.ReasonWaitingForApproval),
		job(4, domain.JobCompleted, ""),
	}
	if _, err := a.Store.CreateJobs(t.Context(), jobs); err != nil {
		t.Fatal(err)
	}
	if n, err := a.demand(t.Context(), "linux"); err != nil || n != 1 {
		t.Fatalf("demand %d, %v; want 1: the queued job, not those held for an approval nor the completed one", n, err)
	}
}

// Only a pool that reuses its instances offers idle ones of its runner
// class for reuse: a class no such pool runs is not searched.
func TestARunnerClassIsReusedOnlyWhereAPoolReusesIt(t *testing.T) {
	a, _ := appOnFile(t, "runners:\n  small: {image: ubuntu-24.04}\n  large: {image: ubuntu-24.04}\npools:\n"+
		"  linux:\n    runner: small\n    reuse: true\n  big:\n    runner: large\n")
	for runner, want := range map[string]bool{"small": true, "large": false, "adhoc-1": false} {
		if got := a.reusedRunner(runner); got != want {
			t.Errorf("reusedRunner(%q) = %v, want %v", runner, got, want)
		}
	}
}
