package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func jobConcurrencyContracts() []contract {
	return []contract{
		{"ConcurrentJobAssignmentsHaveOneWinner", testConcurrentJobAssignments},
		{"ConcurrentJobCreatesDedupe", testConcurrentJobCreates},
		{"ConcurrentJobBatchesNeverAssignTwice", testConcurrentJobBatches},
	}
}

// Dispatchers racing to give one queued job to different instances: exactly
// one may bind it.
func testConcurrentJobAssignments(t *testing.T, e *env) {
	const racers = 64
	e.createJobs(job(1, domain.JobQueued))
	errs := make([]error, racers)
	race(racers, func(k int) {
		_, errs[k] = e.s.TransitionJob(e.ctx, 1, queuedGuard, assign(fmt.Sprintf("i-%02d", k)))
	})
	winner := -1
	for k, err := range errs {
		var ce *domain.JobConflictError
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("racers %d and %d both assigned the job", winner, k)
		case err == nil:
			winner = k
		case !errors.Is(err, domain.ErrConflict) || !errors.As(err, &ce):
			t.Fatalf("racer %d: got %v, want a *JobConflictError", k, err)
		}
	}
	if winner < 0 {
		t.Fatal("no racer assigned the job")
	}
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
	const (
		jobs    = 48
		workers = 16
		window  = 12
		stride  = 3
	)
	var all []domain.Job
	for k := range jobs {
		all = append(all, job(int64(k+1), domain.JobQueued))
	}
	e.createJobs(all...)
	e.clk.Advance(time.Second)

	reqs := make([][]domain.JobTransitionRequest, workers)
	results := make([][]domain.JobTransitionResult, workers)
	errs := make([]error, workers)
	for w := range workers {
		for k := range window {
			id := int64((w*stride+k)%jobs + 1)
			reqs[w] = append(reqs[w], domain.JobTransitionRequest{ID: id, Guard: queuedGuard, Apply: assign(fmt.Sprintf("w%02d", w))})
		}
		if w%2 == 1 {
			slices.Reverse(reqs[w])
		}
	}
	race(workers, func(w int) { results[w], errs[w] = e.s.TransitionJobs(e.ctx, reqs[w]) })

	assignedTo := map[int64]string{}
	for w := range workers {
		if errs[w] != nil || len(results[w]) != len(reqs[w]) {
			t.Fatalf("worker %d: %d results for %d requests, %v", w, len(results[w]), len(reqs[w]), errs[w])
		}
		for k, r := range results[w] {
			id := reqs[w][k].ID
			switch {
			case r.Err == nil && assignedTo[id] != "":
				t.Fatalf("job %d assigned twice: to %s and w%02d", id, assignedTo[id], w)
			case r.Err == nil:
				assignedTo[id] = fmt.Sprintf("w%02d", w)
			case !errors.Is(r.Err, domain.ErrConflict):
				t.Fatalf("worker %d, job %d: got %v, want success or ErrConflict", w, id, r.Err)
			}
		}
	}
	for _, j := range e.listJobs(domain.JobFilter{}) {
		if j.Status != domain.JobAssigned || j.InstanceID != assignedTo[j.ID] || j.Version != 2 {
			t.Errorf("job %d: status %s instance %q version %d; want assigned to %q at version 2",
				j.ID, j.Status, j.InstanceID, j.Version, assignedTo[j.ID])
		}
	}
}
