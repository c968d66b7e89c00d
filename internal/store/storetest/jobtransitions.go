package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

var queuedGuard = domain.JobGuard{Status: domain.JobQueued}

// assign is the dispatcher's queued→assigned mutation.
func assign(instance string) func(*domain.Job) {
	return func(j *domain.Job) { j.Status, j.InstanceID = domain.JobAssigned, instance }
}

func toStatus(s domain.JobStatus) func(*domain.Job) {
	return func(j *domain.Job) { j.Status = s }
}

func testJobTransitionAssigns(t *testing.T, e *env) {
	in := job(1, domain.JobQueued)
	in.InstanceID, in.RunnerName, in.RunnerID = "", "", 0
	e.createJobs(in)
	e.clk.Advance(2*time.Second + 3*time.Microsecond)
	now := e.clk.Now()

	got := e.moveJob(1, queuedGuard, func(j *domain.Job) {
		assign("i-9")(j)
		j.RunnerName, j.RunnerID, j.AssignedAt, j.Via = "i-9-1", 4242, now, domain.ViaReuse
	})
	want := createdJob(in, start)
	want.Status, want.InstanceID, want.AssignedAt, want.Via = domain.JobAssigned, "i-9", now, domain.ViaReuse
	want.RunnerName, want.RunnerID = "i-9-1", 4242
	want.Version, want.UpdatedAt = 2, now
	sameJob(t, "returned job", got, want)
	sameJob(t, "stored job", e.getJob(1), want)
}

func testJobTransitionGuards(t *testing.T, e *env) {
	e.createJobs(job(1, domain.JobQueued))
	e.moveJob(1, queuedGuard, assign("i-1"))
	before := e.getJob(1) // assigned, version 2
	actual := domain.JobGuard{Status: domain.JobAssigned, Version: 2}

	refused := []struct {
		name  string
		guard domain.JobGuard
	}{
		{"other status", domain.JobGuard{Status: domain.JobQueued}},
		{"other status at the right version", domain.JobGuard{Status: domain.JobRunning, Version: 2}},
		{"stale version", domain.JobGuard{Status: domain.JobAssigned, Version: 1}},
		{"future version", domain.JobGuard{Status: domain.JobAssigned, Version: 3}},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			e.clk.Advance(time.Second)
			_, err := e.s.TransitionJob(e.ctx, 1, c.guard, toStatus(domain.JobRunning))
			refusedAs(t, err, domain.ErrConflict, domain.JobConflictError{ID: 1, Want: c.guard, Actual: actual})
			e.jobUnchanged(before)
		})
	}

	got := e.moveJob(1, domain.JobGuard{Status: domain.JobAssigned}, func(j *domain.Job) { j.Attempts = 4 })
	if got.Version != 3 {
		t.Fatalf("version after any-version guard: %d, want 3", got.Version)
	}
	got = e.moveJob(1, domain.JobGuard{Status: domain.JobAssigned, Version: 3}, toStatus(domain.JobRunning))
	if got.Version != 4 || got.Status != domain.JobRunning {
		t.Fatalf("after exact-version guard: %+v", got)
	}
}

func testJobTransitionIllegal(t *testing.T, e *env) {
	cases := []struct {
		name     string
		from, to domain.JobStatus
	}{
		{"completed reopened", domain.JobCompleted, domain.JobQueued},
		{"completed rewritten in place", domain.JobCompleted, domain.JobCompleted},
		{"rejected sent on after all", domain.JobRejected, domain.JobAssigned},
		{"rejected rewritten in place", domain.JobRejected, domain.JobRejected},
		{"running back to assigned", domain.JobRunning, domain.JobAssigned},
		{"running back to the queue", domain.JobRunning, domain.JobQueued},
		{"assigned job rejected", domain.JobAssigned, domain.JobRejected},
		{"unknown target status", domain.JobQueued, domain.JobStatus("waiting")},
	}
	for k, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := int64(100 + k)
			e.createJobs(job(id, c.from))
			before := e.getJob(id)
			e.clk.Advance(time.Second)
			_, err := e.s.TransitionJob(e.ctx, id, domain.JobGuard{Status: c.from}, func(j *domain.Job) {
				j.Status, j.Reason = c.to, "should not be written"
			})
			refusedAs(t, err, nil, domain.JobTransitionError{ID: id, From: c.from, To: c.to})
			e.jobUnchanged(before)
		})
	}
}

// A rejected job is readmitted (Lifecycle.Readmit) once the configuration
// in force serves it: queued again with no route and no reason, listed
// with the queued jobs and not the rejected ones, and kept by the clean-up
// of final jobs. The readmission is counted on the row (Readmissions, read
// back after a restart as the bound on readmissions needs), not as an
// attempt. A second readmission from the row as first read is refused: of
// two reapers, one readmits it.
func testJobReadmission(t *testing.T, e *env) {
	rejected := job(1, domain.JobRejected)
	rejected.InstanceID, rejected.LaunchedOn, rejected.RunnerName, rejected.RunnerID, rejected.Via = "", "", "", 0, ""
	rejected.SendPending, rejected.Interrupted, rejected.Rerun, rejected.Conclusion = false, false, false, ""
	rejected.AssignedAt, rejected.StartedAt, rejected.CompletedAt = time.Time{}, time.Time{}, time.Time{}
	e.createJobs(rejected)
	read := e.getJob(1)
	e.clk.Advance(time.Second)
	r := domain.Lifecycle{}.Readmit(read)
	got := e.moveJob(1, r.Guard, r.Apply)
	if got.Status != domain.JobQueued || got.Reason != "" || !got.Unrouted() || got.Pool != "" || got.Attempts != read.Attempts ||
		got.Readmissions != read.Readmissions+1 || got.Version != read.Version+1 || !got.UpdatedAt.Equal(e.clk.Now()) {
		t.Fatalf("readmitted: %+v", got)
	}
	if stored := e.getJob(1); stored.Status != domain.JobQueued || stored.Version != got.Version || !stored.Unrouted() ||
		stored.Readmissions != read.Readmissions+1 || stored.Attempts != read.Attempts {
		t.Fatalf("stored after the readmission: %+v", stored)
	}
	if ids := jobIDs(e.listJobs(domain.JobFilter{Statuses: []domain.JobStatus{domain.JobQueued}})); !slices.Equal(ids, []int64{1}) {
		t.Fatalf("queued jobs %v, want the readmitted one", ids)
	}
	if ids := jobIDs(e.listJobs(domain.JobFilter{Statuses: []domain.JobStatus{domain.JobRejected}})); len(ids) != 0 {
		t.Fatalf("rejected jobs %v, want none", ids)
	}
	if n, err := e.s.DeleteJobs(e.ctx, e.clk.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("clean-up deleted %d (%v), want the readmitted job kept", n, err)
	}
	_, err := e.s.TransitionJob(e.ctx, 1, r.Guard, r.Apply)
	refusedAs(t, err, domain.ErrConflict, domain.JobConflictError{ID: 1, Want: r.Guard, Actual: domain.JobGuardOf(got)})
}

func testJobTransitionNotFound(t *testing.T, e *env) {
	_, err := e.s.TransitionJob(e.ctx, 404, queuedGuard, assign("i-1"))
	if !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	jobRows.empty(t, e, "transition of a missing job")
}

func testJobTransitionBookkeeping(t *testing.T, e *env) {
	e.createJobs(job(1, domain.JobQueued))
	e.clk.Advance(time.Minute)
	got := e.moveJob(1, queuedGuard, func(j *domain.Job) {
		assign("i-1")(j)
		j.ID, j.Version = 666, 99
		j.CreatedAt, j.UpdatedAt = start.Add(time.Hour), start.Add(time.Hour)
	})
	if got.ID != 1 || got.Version != 2 || !got.CreatedAt.Equal(start) || !got.UpdatedAt.Equal(e.clk.Now()) {
		t.Fatalf("bookkeeping taken from fn: %+v", got)
	}
	sameJob(t, "stored job", e.getJob(1), got)
	jobRows.absent(t, e, 666)
}

func testJobTransitionEveryField(t *testing.T, e *env) {
	e.createJobs(domain.Job{ID: 1, Status: domain.JobQueued})
	e.clk.Advance(time.Second)
	later := e.clk.Now().Add(7*time.Minute + 11*time.Microsecond)
	full := job(1, domain.JobRunning)
	full.QueuedAt, full.CompletedAt = later.Add(-time.Hour), later
	got := e.moveJob(1, queuedGuard, func(j *domain.Job) { *j = full })
	want := full
	want.Version, want.CreatedAt, want.UpdatedAt = 2, start, e.clk.Now()
	sameJob(t, "returned job", got, want)
	sameJob(t, "stored job", e.getJob(1), want)

	// Lists shrink as well as grow.
	got = e.moveJob(1, domain.JobGuard{Status: domain.JobRunning}, func(j *domain.Job) {
		j.Labels, j.Spec = nil, domain.RunnerSpec{}
	})
	sameJob(t, "emptied job", e.getJob(1), got)
}

func testJobBatchMixed(t *testing.T, e *env) {
	e.createJobs(job(1, domain.JobQueued), job(2, domain.JobQueued), job(3, domain.JobCompleted),
		job(4, domain.JobAssigned), job(5, domain.JobQueued))
	before := jobRows.byID(e.listJobs(domain.JobFilter{}))
	e.clk.Advance(3*time.Second + 5*time.Microsecond)
	now := e.clk.Now()

	cases := []batchCase[domain.JobTransitionRequest]{
		{domain.JobTransitionRequest{ID: 1, Guard: queuedGuard, Apply: assign("i-1")}, wins},
		{domain.JobTransitionRequest{ID: 2, Guard: domain.JobGuard{Status: domain.JobAssigned}, Apply: toStatus(domain.JobRunning)}, conflicts},
		{domain.JobTransitionRequest{ID: 404, Guard: queuedGuard, Apply: assign("i-2")}, notFound},
		{domain.JobTransitionRequest{ID: 3, Guard: domain.JobGuard{Status: domain.JobCompleted}, Apply: toStatus(domain.JobQueued)}, illegal},
		{domain.JobTransitionRequest{ID: 4, Guard: domain.JobGuard{Status: domain.JobAssigned, Version: 1}, Apply: toStatus(domain.JobQueued)}, wins},
		{domain.JobTransitionRequest{ID: 5, Guard: domain.JobGuard{Status: domain.JobQueued, Version: 5}, Apply: assign("i-3")}, conflicts},
	}
	jobRows.checkMixedBatch(t, e, cases, before, now)
}

func testJobBatchEmpty(t *testing.T, e *env) { jobRows.checkEmptyBatch(t, e) }

func testJobBatchSameJobTwice(t *testing.T, e *env) {
	e.createJobs(job(1, domain.JobQueued))
	winner := jobRows.batchWinner(t, e, "assigned the job",
		domain.JobTransitionRequest{ID: 1, Guard: queuedGuard, Apply: assign("i-1")},
		domain.JobTransitionRequest{ID: 1, Guard: queuedGuard, Apply: assign("i-2")})
	if got, want := e.getJob(1), []string{"i-1", "i-2"}[winner]; got.InstanceID != want || got.Version != 2 {
		t.Fatalf("job bound to %q at version %d; want %q at 2", got.InstanceID, got.Version, want)
	}
}
