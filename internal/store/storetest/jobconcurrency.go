package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Dispatchers racing to give one queued job to different instances: exactly
// one may bind it.
func testConcurrentJobAssignments(t *testing.T, e *env) {
	const racers = 64
	e.createJobs(job(1, domain.JobQueued))
	errs := make([]error, racers)
	race(racers, func(k int) {
		_, errs[k] = e.s.TransitionJob(e.ctx, 1, queuedGuard, assign(fmt.Sprintf("i-%02d", k)))
	})
	winner := soleWinner(t, "racer", "assigned the job", errs, jobRows.conflictErr)
	got := e.getJob(1)
	if want := fmt.Sprintf("i-%02d", winner); got.Status != domain.JobAssigned || got.InstanceID != want || got.Version != 2 {
		t.Fatalf("final job: status %s instance %q version %d; want assigned to %s at version 2", got.Status, got.InstanceID, got.Version, want)
	}
}

// Redeliveries of one webhook handled at once: one creates the job, the
// others see it exists, and the stored job is the creator's.
func testConcurrentJobCreates(t *testing.T, e *env) {
	const racers = 32
	created := make([][]bool, racers)
	errs := make([]error, racers)
	race(racers, func(k int) {
		j := job(42, domain.JobQueued)
		j.Name = fmt.Sprintf("racer-%02d", k)
		created[k], errs[k] = e.s.CreateJobs(e.ctx, []domain.Job{j})
	})
	winner := -1
	for k := range racers {
		switch {
		case errs[k] != nil:
			t.Fatalf("racer %d: %v", k, errs[k])
		case len(created[k]) != 1:
			t.Fatalf("racer %d: %d results for one job", k, len(created[k]))
		case created[k][0] && winner >= 0:
			t.Fatalf("racers %d and %d both created the job", winner, k)
		case created[k][0]:
			winner = k
		}
	}
	if winner < 0 {
		t.Fatal("no racer created the job")
	}
	if got, want := e.getJob(42), fmt.Sprintf("racer-%02d", winner); got.Name != want || got.Version != 1 {
		t.Fatalf("stored job named %q at version %d; want %q at 1", got.Name, got.Version, want)
	}
}

// Dispatchers assign overlapping windows of a shared set of queued jobs in
// batches, half of them walking backwards. Every job ends assigned once.
func testConcurrentJobBatches(t *testing.T, e *env) {
	var all []domain.Job
	for k := range 48 {
		all = append(all, job(int64(k+1), domain.JobQueued))
	}
	e.createJobs(all...)
	e.clk.Advance(time.Second)
	assignedTo := jobRows.raceBatches(t, e, jobIDs(all),
		func(w int) string { return fmt.Sprintf("w%02d", w) },
		func(id int64, instance string) domain.JobTransitionRequest {
			return domain.JobTransitionRequest{ID: id, Guard: queuedGuard, Apply: assign(instance)}
		})
	for _, j := range e.listJobs(domain.JobFilter{}) {
		if j.Status != domain.JobAssigned || j.InstanceID != assignedTo[j.ID] || j.Version != 2 {
			t.Errorf("job %d: status %s instance %q version %d; want assigned to %q at version 2",
				j.ID, j.Status, j.InstanceID, j.Version, assignedTo[j.ID])
		}
	}
}
