package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// A listing is read page by page with a filter's After: each page starts
// past the position (CreatedAt, then ID) of the last row of the page
// before. The contracts below hold a store to this:
//
//   - After keeps exactly the rows past the position in the listing's
//     order (after it oldest first, before it newest first), whether or
//     not a row is at the position, and Limit counts from there; a
//     position past the last row lists nothing.
//   - Pages read that way list every row of the listing once, in its
//     order, with any filter, however many rows share a CreatedAt.
//   - While the pages are read, a row created later than every row there
//     (a newer CreatedAt) is listed once on a later page oldest first and
//     on none newest first; a deleted row is not listed from then on, and
//     no other row is skipped or listed twice for it.

// walk reads a listing page after page, each limit rows past the last row
// of the page before (the first from the start), until a page comes back
// empty, and returns the rows in the order read. between runs after the
// first page, when set. A page over the limit, or more pages than rows
// could fill, fails the test.
func walk[R any, ID int64 | string](t *testing.T, limit, rows int, page func(after *domain.ListPosition[ID]) []R,
	at func(R) domain.ListPosition[ID], between func()) []R {
	t.Helper()
	var out []R
	var after *domain.ListPosition[ID]
	for n := 1; ; n++ {
		got := page(after)
		if len(got) > limit {
			t.Fatalf("page %d: %d rows, over the limit of %d", n, len(got), limit)
		}
		if len(got) == 0 {
			return out
		}
		if n > rows+1 {
			t.Fatalf("page %d of %d rows at most %d to a page: the pages do not end", n, rows, limit)
		}
		out = append(out, got...)
		last := at(got[len(got)-1])
		after = &last
		if n == 1 && between != nil {
			between()
		}
	}
}

// namedFilter is a listing's filter and what a subtest calls it.
type namedFilter[F any] struct {
	name string
	f    F
}

// walkFilters pages through each filter's listing both ways, in pages of
// 1 to 3 rows, and fails unless the pages hold, in order, the rows the
// listing holds without a limit. list lists f in the order newest says,
// at most limit rows (0: all) after the position after.
func walkFilters[F, R any, ID int64 | string](t *testing.T, filters []namedFilter[F],
	list func(f F, newest bool, limit int, after *domain.ListPosition[ID]) []R, at func(R) domain.ListPosition[ID]) {
	t.Helper()
	idsOf := func(rows []R) []ID {
		out := make([]ID, len(rows))
		for k, r := range rows {
			out[k] = at(r).ID
		}
		return out
	}
	for _, c := range filters {
		for _, newest := range []bool{false, true} {
			for _, limit := range []int{1, 2, 3} {
				t.Run(fmt.Sprintf("%s/newest=%v/limit=%d", c.name, newest, limit), func(t *testing.T) {
					want := idsOf(list(c.f, newest, 0, nil))
					got := walk(t, limit, len(want), func(after *domain.ListPosition[ID]) []R {
						return list(c.f, newest, limit, after)
					}, at, nil)
					if ids := idsOf(got); !slices.Equal(ids, want) {
						t.Fatalf("pages listed %v, want %v", ids, want)
					}
				})
			}
		}
	}
}

// pagedJobs are created for the paging contracts: ties on CreatedAt, with
// ids whose order as numbers is not their order as text (9, 10), statuses
// and pools mixed.
func (e *env) pagedJobs() {
	e.t.Helper()
	batches := [][]struct {
		id     int64
		status domain.JobStatus
		pool   string
	}{
		{{30, domain.JobQueued, "linux"}, {9, domain.JobCompleted, "arm"}, {10, domain.JobQueued, "arm"}},
		{{5, domain.JobCompleted, "linux"}, {40, domain.JobQueued, "arm"}, {41, domain.JobRunning, "linux"}},
		{{7, domain.JobQueued, "linux"}, {8, domain.JobCompleted, "arm"}},
		{{1, domain.JobQueued, "arm"}},
	}
	for k, batch := range batches {
		e.clk.Advance([]time.Duration{0, time.Microsecond, time.Second, time.Second}[k])
		var jobs []domain.Job
		for _, r := range batch {
			j := job(r.id, r.status)
			j.Pool = r.pool
			jobs = append(jobs, j)
		}
		e.createJobs(jobs...)
	}
}

func testJobListAfter(t *testing.T, e *env) {
	e.createJobs(job(30, domain.JobQueued), job(9, domain.JobQueued), job(10, domain.JobQueued))
	e.clk.Advance(time.Second)
	e.createJobs(job(5, domain.JobQueued))
	at := func(d time.Duration, id int64) *domain.ListPosition[int64] {
		return &domain.ListPosition[int64]{CreatedAt: start.Add(d), ID: id}
	}
	checkFilters(t, []filterCase[domain.JobFilter, int64]{
		{"oldest, within a tie", domain.JobFilter{After: at(0, 9)}, []int64{10, 30, 5}},
		{"newest, within a tie", domain.JobFilter{After: at(0, 30), Newest: true}, []int64{10, 9}},
		{"oldest, within a tie, limited", domain.JobFilter{After: at(0, 9), Limit: 1}, []int64{10}},
		{"newest, limited", domain.JobFilter{After: at(time.Second, 5), Newest: true, Limit: 2}, []int64{30, 10}},
		{"oldest, at no row", domain.JobFilter{After: at(0, 15)}, []int64{30, 5}},
		{"newest, at no row", domain.JobFilter{After: at(0, 15), Newest: true}, []int64{10, 9}},
		{"oldest, between times", domain.JobFilter{After: at(time.Millisecond, 0)}, []int64{5}},
		{"newest, between times", domain.JobFilter{After: at(time.Millisecond, 0), Newest: true}, []int64{30, 10, 9}},
		{"oldest, with a filter", domain.JobFilter{After: at(0, 9), IDs: []int64{9, 30, 5}}, []int64{30, 5}},
		{"oldest, past the last", domain.JobFilter{After: at(time.Second, 5)}, nil},
		{"newest, past the last", domain.JobFilter{After: at(0, 9), Newest: true}, nil},
		{"oldest, past every row", domain.JobFilter{After: at(time.Hour, 0)}, nil},
		{"newest, past every row", domain.JobFilter{After: at(-time.Hour, 0), Newest: true}, nil},
	}, func(f domain.JobFilter) []int64 { return jobIDs(e.listJobs(f)) })
}

func testJobListPages(t *testing.T, e *env) {
	e.pagedJobs()
	walkFilters(t, []namedFilter[domain.JobFilter]{
		{"every job", domain.JobFilter{}},
		{"two statuses", domain.JobFilter{Statuses: []domain.JobStatus{domain.JobQueued, domain.JobCompleted}}},
		{"a pool", domain.JobFilter{Pool: "arm"}},
		{"named jobs", domain.JobFilter{IDs: []int64{1, 5, 9, 10, 30, 40}}},
	}, func(f domain.JobFilter, newest bool, limit int, after *domain.ListPosition[int64]) []domain.Job {
		f.Newest, f.Limit, f.After = newest, limit, after
		return e.listJobs(f)
	}, domain.Job.Position)
}

// testJobListPagesWhileChanging reads jobs created at start (30, 9 and
// 10, completed), a microsecond later (5 and 40, queued) and a second
// later (7, completed) in pages of two. After the first page, 100 and 101
// are created a second later still, and the jobs created at start are
// deleted: oldest first, two of them were read already and the third not.
func testJobListPagesWhileChanging(newest bool, want ...int64) func(t *testing.T, e *env) {
	return func(t *testing.T, e *env) {
		e.createJobs(job(30, domain.JobCompleted), job(9, domain.JobCompleted), job(10, domain.JobCompleted))
		e.clk.Advance(time.Microsecond)
		e.createJobs(job(5, domain.JobQueued), job(40, domain.JobQueued))
		e.clk.Advance(time.Second)
		e.createJobs(job(7, domain.JobCompleted))
		got := walk(t, 2, 9, func(after *domain.ListPosition[int64]) []domain.Job {
			return e.listJobs(domain.JobFilter{Newest: newest, Limit: 2, After: after})
		}, domain.Job.Position, func() {
			e.clk.Advance(time.Second)
			e.createJobs(job(100, domain.JobQueued), job(101, domain.JobQueued))
			if n, err := e.s.DeleteJobs(e.ctx, start.Add(time.Microsecond)); err != nil || n != 3 {
				t.Fatalf("delete the jobs created at start: %d deleted (%v), want 3", n, err)
			}
		})
		if ids := jobIDs(got); !slices.Equal(ids, want) {
			t.Fatalf("pages listed %v, want %v", ids, want)
		}
	}
}

// pagedInstances are created for the paging contracts: ties on CreatedAt,
// states, pools and runners mixed.
func (e *env) pagedInstances() {
	e.t.Helper()
	batches := [][]struct {
		id, pool, runner string
		state            domain.State
	}{
		{{"m", "linux", "small", domain.StateReady}, {"c", "arm", "large", domain.StateBooting}, {"x", "arm", "small", domain.StateTerminated}},
		{{"a", "linux", "large", domain.StateReady}, {"b", "arm", "small", domain.StateReady}, {"bb", "linux", "small", domain.StateBooting}},
		{{"k", "linux", "large", domain.StateTerminated}, {"l", "arm", "small", domain.StateReady}},
		{{"z", "arm", "large", domain.StateBooting}},
	}
	for k, batch := range batches {
		e.clk.Advance([]time.Duration{0, time.Microsecond, time.Second, time.Second}[k])
		var insts []domain.Instance
		for _, r := range batch {
			in := instance(r.id, r.state)
			in.Pool, in.Runner = r.pool, r.runner
			insts = append(insts, in)
		}
		e.create(insts...)
	}
}

func testListAfter(t *testing.T, e *env) {
	e.create(instance("m", domain.StateReady), instance("c", domain.StateReady), instance("x", domain.StateReady))
	e.clk.Advance(time.Second)
	e.create(instance("a", domain.StateReady))
	at := func(d time.Duration, id string) *domain.ListPosition[string] {
		return &domain.ListPosition[string]{CreatedAt: start.Add(d), ID: id}
	}
	checkFilters(t, []filterCase[domain.InstanceFilter, string]{
		{"oldest, within a tie", domain.InstanceFilter{After: at(0, "c")}, []string{"m", "x", "a"}},
		{"newest, within a tie", domain.InstanceFilter{After: at(0, "x"), Newest: true}, []string{"m", "c"}},
		{"oldest, within a tie, limited", domain.InstanceFilter{After: at(0, "c"), Limit: 1}, []string{"m"}},
		{"newest, limited", domain.InstanceFilter{After: at(time.Second, "a"), Newest: true, Limit: 2}, []string{"x", "m"}},
		{"oldest, at no row", domain.InstanceFilter{After: at(0, "d")}, []string{"m", "x", "a"}},
		{"newest, at no row", domain.InstanceFilter{After: at(0, "d"), Newest: true}, []string{"c"}},
		{"oldest, between times", domain.InstanceFilter{After: at(time.Millisecond, "")}, []string{"a"}},
		{"newest, between times", domain.InstanceFilter{After: at(time.Millisecond, ""), Newest: true}, []string{"x", "m", "c"}},
		{"oldest, with a filter", domain.InstanceFilter{After: at(0, "c"), CloudID: "i-x"}, []string{"x"}},
		{"oldest, past the last", domain.InstanceFilter{After: at(time.Second, "a")}, nil},
		{"newest, past the last", domain.InstanceFilter{After: at(0, "c"), Newest: true}, nil},
		{"oldest, past every row", domain.InstanceFilter{After: at(time.Hour, "")}, nil},
		{"newest, past every row", domain.InstanceFilter{After: at(-time.Hour, ""), Newest: true}, nil},
	}, func(f domain.InstanceFilter) []string { return ids(e.list(f)) })
}

func testListPages(t *testing.T, e *env) {
	e.pagedInstances()
	walkFilters(t, []namedFilter[domain.InstanceFilter]{
		{"every instance", domain.InstanceFilter{}},
		{"two states", domain.InstanceFilter{States: []domain.State{domain.StateReady, domain.StateBooting}}},
		{"a pool", domain.InstanceFilter{Pool: "arm"}},
		{"a runner", domain.InstanceFilter{Runner: "small"}},
	}, func(f domain.InstanceFilter, newest bool, limit int, after *domain.ListPosition[string]) []domain.Instance {
		f.Newest, f.Limit, f.After = newest, limit, after
		return e.list(f)
	}, domain.Instance.Position)
}

// testListPagesWhileChanging reads instances created at start (m, c and
// x, terminated), a microsecond later (a and b, ready) and a second later
// (k, terminated) in pages of two. After the first page, n and o are
// created a second later still, and the instances created at start are
// deleted: oldest first, two of them were read already and the third not.
func testListPagesWhileChanging(newest bool, want ...string) func(t *testing.T, e *env) {
	return func(t *testing.T, e *env) {
		e.create(instance("m", domain.StateTerminated), instance("c", domain.StateTerminated), instance("x", domain.StateTerminated))
		e.clk.Advance(time.Microsecond)
		e.create(instance("a", domain.StateReady), instance("b", domain.StateReady))
		e.clk.Advance(time.Second)
		e.create(instance("k", domain.StateTerminated))
		got := walk(t, 2, 9, func(after *domain.ListPosition[string]) []domain.Instance {
			return e.list(domain.InstanceFilter{Newest: newest, Limit: 2, After: after})
		}, domain.Instance.Position, func() {
			e.clk.Advance(time.Second)
			e.create(instance("n", domain.StateReady), instance("o", domain.StateReady))
			if err := e.s.DeleteInstances(e.ctx, []string{"m", "c", "x"}); err != nil {
				t.Fatalf("delete the instances created at start: %v", err)
			}
		})
		if got := ids(got); !slices.Equal(got, want) {
			t.Fatalf("pages listed %v, want %v", got, want)
		}
	}
}
