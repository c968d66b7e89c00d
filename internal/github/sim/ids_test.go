package sim_test

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/github/sim"
)

// A simulated GitHub started again a second later (serve restarted on a
// store that kept the first one's jobs) hands out job and run ids above
// the first one's: the intake would take a job with an old id for a
// redelivery and never serve it.
func TestASimulatedGitHubStartedAgainHandsOutNewIDs(t *testing.T) {
	start := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	first := sim.New(clock.NewVirtual(start), sim.Options{})
	var lastJob, lastRun int64
	for range 200 {
		j := first.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}})
		lastJob, lastRun = j.ID, j.RunID
	}
	again := sim.New(clock.NewVirtual(start.Add(time.Second)), sim.Options{})
	j := again.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}})
	if j.ID <= lastJob || j.RunID <= lastRun {
		t.Fatalf("job %d of run %d after the restart, want above the first one's job %d and run %d", j.ID, j.RunID, lastJob, lastRun)
	}
}
