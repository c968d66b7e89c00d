package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// job returns a job in status with every field set, so that a backend that
// forgets a column fails the round trip. Its own times are in a zone other
// than UTC to check that they come back in UTC.
func job(id int64, status domain.JobStatus) domain.Job {
	zone := time.FixedZone("UTC-5", -5*60*60)
	return domain.Job{
		ID: id, RunID: 9_000_000_000 + id, RunAttempt: 2,
		Repo: "acme/widgets", Name: fmt.Sprintf("build %d", id), Workflow: "ci.yml",
		Labels: []string{"runs-on=123/pool=linux", "self-hosted"},
		Status: status, Route: domain.RoutePool, Via: domain.ViaPool, Pool: "linux", Runner: "small",
		Spec: domain.RunnerSpec{
			Name: "small", Image: "ubuntu-24.04", CPU: domain.Range{Min: 2, Max: 4}, RAM: domain.Range{Min: 4, Max: 8},
			Family: []string{"c7i", "m7i"}, Volume: domain.Volume{Type: "gp3", SizeGB: 40, ThroughputMBps: 125, IOPS: 3000},
			Spot: "price-capacity-optimized", Retry: domain.RetryNever,
		},
		InstanceID: fmt.Sprintf("inst-%d", id), LaunchedOn: fmt.Sprintf("launched-%d", id), RunnerName: fmt.Sprintf("bullpen-%d", id), RunnerID: 77 + id,
		Reason: "because", Conclusion: "success", Attempts: 1, Readmissions: 2, SendPending: true, Interrupted: true, Rerun: true,
		QueuedAt:    start.Add(-5*time.Second - 11*time.Microsecond).In(zone),
		AssignedAt:  start.Add(-4 * time.Second).In(zone),
		StartedAt:   start.Add(-3*time.Second + 250*time.Microsecond).In(zone),
		CompletedAt: start.Add(-2 * time.Second).In(zone),
	}
}

// createdJob is what a store holds after CreateJobs at now.
func createdJob(in domain.Job, now time.Time) domain.Job {
	in.Version, in.CreatedAt, in.UpdatedAt = 1, now, now
	return in
}

func (e *env) createJobs(jobs ...domain.Job) []bool {
	e.t.Helper()
	created, err := e.s.CreateJobs(e.ctx, jobs)
	if err != nil {
		e.t.Fatalf("create jobs: %v", err)
	}
	if len(created) != len(jobs) {
		e.t.Fatalf("create jobs: %d results for %d jobs", len(created), len(jobs))
	}
	return created
}

func (e *env) getJob(id int64) domain.Job {
	e.t.Helper()
	return must[domain.Job](e, "get job %d", id)(e.s.GetJob(e.ctx, id))
}

func (e *env) listJobs(f domain.JobFilter) []domain.Job {
	e.t.Helper()
	return must[[]domain.Job](e, "list jobs %+v", f)(e.s.ListJobs(e.ctx, f))
}

// moveJob applies a job transition that must succeed.
func (e *env) moveJob(id int64, g domain.JobGuard, fn func(*domain.Job)) domain.Job {
	e.t.Helper()
	return must[domain.Job](e, "transition job %d", id)(e.s.TransitionJob(e.ctx, id, g, fn))
}

// jobUnchanged fails unless the stored job still equals before.
func (e *env) jobUnchanged(before domain.Job) {
	e.t.Helper()
	sameJob(e.t, "job after refused change", e.getJob(before.ID), before)
}

// sameJob fails unless got equals want field by field: times as instants
// (and in UTC), an empty list the same as none.
func sameJob(t *testing.T, what string, got, want domain.Job) {
	t.Helper()
	sameFields(t, what, want.ID, emptyListsAsNil(got), emptyListsAsNil(want))
}

// emptyListsAsNil lets a backend that cannot tell an empty list from a
// missing one (JSON with omitempty, DynamoDB) pass.
func emptyListsAsNil(j domain.Job) domain.Job {
	if len(j.Labels) == 0 {
		j.Labels = nil
	}
	if len(j.Spec.Family) == 0 {
		j.Spec.Family = nil
	}
	return j
}

func jobIDs(jobs []domain.Job) []int64 {
	out := make([]int64, len(jobs))
	for k, j := range jobs {
		out[k] = j.ID
	}
	return out
}

func testJobRoundTrip(t *testing.T, e *env) {
	in := job(1, domain.JobQueued)
	if created := e.createJobs(in); !created[0] {
		t.Fatal("new job not created")
	}
	sameJob(t, "job", e.getJob(1), createdJob(in, start))
	got := e.listJobs(domain.JobFilter{})
	if len(got) != 1 {
		t.Fatalf("list: got %d jobs, want 1", len(got))
	}
	sameJob(t, "listed job", got[0], createdJob(in, start))

	// Zero values round-trip too: no labels, no spec, no times.
	bare := domain.Job{ID: 2, Status: domain.JobRejected}
	e.createJobs(bare)
	sameJob(t, "bare job", e.getJob(2), createdJob(bare, start))
}

func testJobCreateStamps(t *testing.T, e *env) {
	e.clk.Advance(1500*time.Millisecond + 7*time.Microsecond)
	now := e.clk.Now()
	in := job(1, domain.JobQueued)
	in.Version, in.CreatedAt, in.UpdatedAt = 7, start.Add(-time.Hour), start.Add(-time.Hour)
	e.createJobs(in)
	got := e.getJob(1)
	if got.Version != 1 || !got.CreatedAt.Equal(now) || !got.UpdatedAt.Equal(now) {
		t.Fatalf("bookkeeping: got version %d created %v updated %v; want 1 and %v", got.Version, got.CreatedAt, got.UpdatedAt, now)
	}
	if !got.QueuedAt.Equal(in.QueuedAt) {
		t.Fatalf("queued at %v, want the caller's %v", got.QueuedAt, in.QueuedAt)
	}
}

// A redelivered webhook creates the job again: the stored job, which may
// have moved on, wins.
func testJobCreateExisting(t *testing.T, e *env) {
	e.createJobs(job(1, domain.JobQueued))
	assigned := e.moveJob(1, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) { j.Status = domain.JobAssigned })
	e.clk.Advance(time.Second)

	again := job(1, domain.JobQueued)
	again.Name = "redelivered"
	second := job(2, domain.JobQueued)
	dup := job(2, domain.JobRejected)
	dup.Reason = "the batch's second copy"
	created := e.createJobs(again, second, dup, job(3, domain.JobQueued))
	if want := []bool{false, true, false, true}; !slices.Equal(created, want) {
		t.Fatalf("created %v, want %v", created, want)
	}
	sameJob(t, "existing job", e.getJob(1), assigned)
	sameJob(t, "first copy in the batch", e.getJob(2), createdJob(second, e.clk.Now()))
}

func testJobCreateNothing(t *testing.T, e *env) {
	created, err := e.s.CreateJobs(e.ctx, nil)
	if err != nil || len(created) != 0 {
		t.Fatalf("create no jobs: %v, %v", created, err)
	}
	jobRows.empty(t, e, "creating no jobs")
}

func testJobCreateInvalid(t *testing.T, e *env) {
	cases := []struct {
		name string
		bad  domain.Job
	}{
		{"zero id", job(0, domain.JobQueued)},
		{"negative id", job(-4, domain.JobQueued)},
		{"unknown status", job(5, domain.JobStatus("waiting"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.s.CreateJobs(e.ctx, []domain.Job{job(1, domain.JobQueued), c.bad})
			if err == nil {
				t.Fatal("invalid job accepted")
			}
			jobRows.empty(t, e, "a refused batch")
		})
	}
}

func testJobGetUnknown(t *testing.T, e *env) { jobRows.absent(t, e, 404) }

// jobBoard creates jobs 1..6 spread over statuses, pools and instances,
// each a millisecond after the last (3 and 4 interrupted, 4 re-run); a
// minute later 2 is touched and 5 rejected.
func jobBoard(e *env) {
	e.t.Helper()
	rows := []struct {
		id       int64
		status   domain.JobStatus
		pool, at string
	}{
		{1, domain.JobQueued, "linux", ""},
		{2, domain.JobAssigned, "linux", "i-2"},
		{3, domain.JobRunning, "arm", "i-3"},
		{4, domain.JobCompleted, "", "i-4"},
		{5, domain.JobQueued, "gpu", ""},
		{6, domain.JobQueued, "arm", ""},
	}
	for _, r := range rows {
		j := job(r.id, r.status)
		j.Pool, j.InstanceID = r.pool, r.at
		// 3 and 4 were interrupted; 4 has been re-run.
		j.Interrupted, j.Rerun = r.id == 3 || r.id == 4, r.id == 4
		e.createJobs(j)
		e.clk.Advance(time.Millisecond)
	}
	e.clk.Advance(time.Minute)
	e.moveJob(2, domain.JobGuard{Status: domain.JobAssigned}, func(j *domain.Job) { j.Attempts = 2 })
	e.moveJob(5, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) {
		j.Status, j.Reason = domain.JobRejected, "unknown pool"
	})
}

func testJobListFilters(t *testing.T, e *env) {
	jobBoard(e)
	touched := start.Add(time.Minute + 6*time.Millisecond) // when 2 and 5 changed
	checkFilters(t, []filterCase[domain.JobFilter, int64]{
		{"no filter", domain.JobFilter{}, []int64{1, 2, 3, 4, 5, 6}},
		{"one status", domain.JobFilter{Statuses: []domain.JobStatus{domain.JobQueued}}, []int64{1, 6}},
		{"final statuses", domain.JobFilter{Statuses: []domain.JobStatus{domain.JobRejected, domain.JobCompleted}}, []int64{4, 5}},
		{"pool", domain.JobFilter{Pool: "arm"}, []int64{3, 6}},
		{"instance", domain.JobFilter{Instance: "i-3"}, []int64{3}},
		{"updated before", domain.JobFilter{UpdatedBefore: touched}, []int64{1, 3, 4, 6}},
		{"ids", domain.JobFilter{IDs: []int64{6, 2, 99}}, []int64{2, 6}},
		{"ids and status", domain.JobFilter{IDs: []int64{1, 2, 6}, Statuses: []domain.JobStatus{domain.JobQueued}}, []int64{1, 6}},
		{"updated before, exclusive", domain.JobFilter{UpdatedBefore: touched.Add(time.Microsecond)}, []int64{1, 2, 3, 4, 5, 6}},
		{"pool and status", domain.JobFilter{Pool: "linux", Statuses: []domain.JobStatus{domain.JobAssigned, domain.JobRunning}}, []int64{2}},
		{"every field", domain.JobFilter{Statuses: []domain.JobStatus{domain.JobRunning}, Pool: "arm", Instance: "i-3",
			UpdatedBefore: touched, Limit: 5}, []int64{3}},
		{"limit", domain.JobFilter{Limit: 2}, []int64{1, 2}},
		{"limit newest", domain.JobFilter{Limit: 2, Newest: true}, []int64{6, 5}},
		{"newest with filter", domain.JobFilter{Statuses: []domain.JobStatus{domain.JobQueued, domain.JobRunning}, Newest: true}, []int64{6, 3, 1}},
		{"limit above count", domain.JobFilter{Pool: "linux", Limit: 10}, []int64{1, 2}},
		{"a pool's live jobs, newest, limit", domain.JobFilter{Pool: "linux",
			Statuses: []domain.JobStatus{domain.JobQueued, domain.JobAssigned, domain.JobRunning}, Newest: true, Limit: 1}, []int64{2}},
		{"no match", domain.JobFilter{Pool: "windows"}, nil},
		{"to re-run", domain.JobFilter{ToRerun: true}, []int64{3}},
		{"to re-run and status", domain.JobFilter{ToRerun: true, Statuses: []domain.JobStatus{domain.JobCompleted}}, nil},
	}, func(f domain.JobFilter) []int64 { return jobIDs(e.listJobs(f)) })
}

func testJobListOrder(t *testing.T, e *env) {
	// One batch shares a CreatedAt, so the id breaks the tie; a later
	// batch sorts after it whatever its ids; an update moves nothing.
	e.createJobs(job(30, domain.JobQueued), job(10, domain.JobQueued), job(20, domain.JobQueued))
	e.clk.Advance(time.Microsecond)
	e.createJobs(job(5, domain.JobQueued))
	e.clk.Advance(time.Second)
	e.createJobs(job(7, domain.JobQueued))
	e.moveJob(10, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) { j.Attempts = 3 })

	checkFilters(t, []filterCase[domain.JobFilter, int64]{
		{"oldest first", domain.JobFilter{}, []int64{10, 20, 30, 5, 7}},
		{"newest first", domain.JobFilter{Newest: true}, []int64{7, 5, 30, 20, 10}},
		{"oldest three", domain.JobFilter{Limit: 3}, []int64{10, 20, 30}},
		{"newest three", domain.JobFilter{Limit: 3, Newest: true}, []int64{7, 5, 30}},
	}, func(f domain.JobFilter) []int64 { return jobIDs(e.listJobs(f)) })
}

func testJobDelete(t *testing.T, e *env) {
	jobBoard(e) // 4 completed at start+3ms; 5 rejected, touched at start+1m6ms
	cases := []struct {
		before time.Time
		want   int
		left   []int64
	}{
		{start.Add(3 * time.Millisecond), 0, []int64{1, 2, 3, 4, 5, 6}}, // strictly before
		{start.Add(3*time.Millisecond + time.Microsecond), 1, []int64{1, 2, 3, 5, 6}},
		{start.Add(time.Minute), 0, []int64{1, 2, 3, 5, 6}}, // 5 was created before, changed after
		{start.Add(time.Hour), 1, []int64{1, 2, 3, 6}},
		{start.Add(time.Hour), 0, []int64{1, 2, 3, 6}}, // live jobs are never deleted
	}
	for k, c := range cases {
		n, err := e.s.DeleteJobs(e.ctx, c.before)
		if err != nil || n != c.want {
			t.Fatalf("step %d: deleted %d (%v), want %d", k, n, err, c.want)
		}
		if got := jobIDs(e.listJobs(domain.JobFilter{})); !slices.Equal(got, c.left) {
			t.Fatalf("step %d: left %v, want %v", k, got, c.left)
		}
	}
	jobRows.absent(t, e, 4)
}
