package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func testCreateRoundTrip(t *testing.T, e *env) {
	in := instance("a", domain.StateReady)
	in.JobStarted, in.Job = true, "job-1"
	e.create(in)
	sameInstance(t, "instance", e.get("a"), created(in, start))
	got := e.list(domain.InstanceFilter{})
	if len(got) != 1 {
		t.Fatalf("list: got %d rows, want 1", len(got))
	}
	sameInstance(t, "listed instance", got[0], created(in, start))
}

func testCreateStamps(t *testing.T, e *env) {
	e.clk.Advance(1500*time.Millisecond + 7*time.Microsecond)
	now := e.clk.Now()
	in := instance("a", domain.StatePending)
	in.Version = 7 // the store owns these four
	in.CreatedAt = start.Add(-time.Hour)
	in.UpdatedAt = start.Add(-time.Hour)
	in.StateSince = start.Add(-time.Hour)
	e.create(in)
	got := e.get("a")
	if got.Version != 1 || !got.CreatedAt.Equal(now) || !got.UpdatedAt.Equal(now) || !got.StateSince.Equal(now) {
		t.Fatalf("bookkeeping: got version %d created %v updated %v state since %v; want 1 and %v",
			got.Version, got.CreatedAt, got.UpdatedAt, got.StateSince, now)
	}
}

func testCreateNothing(t *testing.T, e *env) {
	if err := e.s.CreateInstances(e.ctx, nil); err != nil {
		t.Fatalf("create no instances: %v", err)
	}
	instanceRows.empty(t, e, "creating no instances")
}

func testCreateTaken(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady))
	cases := []struct {
		name  string
		batch []domain.Instance
	}{
		{"id taken by a stored row", []domain.Instance{instance("b", domain.StateReady), instance("a", domain.StatePending)}},
		{"id repeated in the batch", []domain.Instance{instance("c", domain.StateReady), instance("c", domain.StatePending)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := e.s.CreateInstances(e.ctx, c.batch)
			if !errors.Is(err, domain.ErrExists) {
				t.Fatalf("got %v, want ErrExists", err)
			}
			if got := ids(e.list(domain.InstanceFilter{})); !slices.Equal(got, []string{"a"}) {
				t.Fatalf("rows after failed batch: %v, want only [a]", got)
			}
		})
	}
	if got := e.get("a"); got.State != domain.StateReady {
		t.Fatalf("existing row changed: %+v", got)
	}
}

func testCreateInvalid(t *testing.T, e *env) {
	cases := []struct {
		name string
		bad  domain.Instance
	}{
		{"empty id", instance("", domain.StateReady)},
		{"unknown state", instance("x", domain.State("idle"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := e.s.CreateInstances(e.ctx, []domain.Instance{instance("ok", domain.StateReady), c.bad})
			if err == nil {
				t.Fatal("invalid row accepted")
			}
			instanceRows.empty(t, e, "a refused batch")
		})
	}
}

func testGetUnknown(t *testing.T, e *env) { instanceRows.absent(t, e, "nope") }

// fleet creates rows r1..r6 spread over pools, runners, jobs and states,
// each a millisecond after the last.
func fleet(e *env) {
	e.t.Helper()
	rows := []struct {
		id, pool, runner, job, cloud string
		state                        domain.State
	}{
		{"r1", "linux", "small", "", "i-1", domain.StateReady},
		{"r2", "linux", "large", "", "i-2", domain.StateBooting},
		{"r3", "arm", "small", "", "i-3", domain.StateReady},
		{"r4", "", "small", "job-7", "i-4", domain.StateRunning},
		{"r5", "linux", "small", "job-8", "i-5", domain.StateClaimed},
		{"r6", "arm", "large", "", "", domain.StatePending},
	}
	for _, r := range rows {
		in := instance(r.id, r.state)
		in.Pool, in.Runner, in.Job, in.CloudID = r.pool, r.runner, r.job, r.cloud
		e.create(in)
		e.clk.Advance(time.Millisecond)
	}
}

func testListFilters(t *testing.T, e *env) {
	fleet(e)
	checkFilters(t, []filterCase[domain.InstanceFilter, string]{
		{"no filter", domain.InstanceFilter{}, []string{"r1", "r2", "r3", "r4", "r5", "r6"}},
		{"pool", domain.InstanceFilter{Pool: "linux"}, []string{"r1", "r2", "r5"}},
		{"runner", domain.InstanceFilter{Runner: "large"}, []string{"r2", "r6"}},
		{"job", domain.InstanceFilter{Job: "job-7"}, []string{"r4"}},
		{"cloud id", domain.InstanceFilter{CloudID: "i-3"}, []string{"r3"}},
		{"one state", domain.InstanceFilter{States: []domain.State{domain.StateReady}}, []string{"r1", "r3"}},
		{"several states", domain.InstanceFilter{States: []domain.State{domain.StatePending, domain.StateRunning, domain.StateReady}},
			[]string{"r1", "r3", "r4", "r6"}},
		{"pool and state", domain.InstanceFilter{Pool: "linux", States: []domain.State{domain.StateReady, domain.StateClaimed}},
			[]string{"r1", "r5"}},
		{"pool and runner", domain.InstanceFilter{Pool: "arm", Runner: "small"}, []string{"r3"}},
		{"every field", domain.InstanceFilter{Pool: "linux", Runner: "small", Job: "job-8", CloudID: "i-5",
			States: []domain.State{domain.StateClaimed}}, []string{"r5"}},
		{"no match", domain.InstanceFilter{Pool: "windows"}, nil},
		{"state no row is in", domain.InstanceFilter{States: []domain.State{domain.StateTerminated}}, nil},
	}, func(f domain.InstanceFilter) []string { return ids(e.list(f)) })
}

// An instance is past its deadline from the deadline's instant on; one
// without a deadline never is. The filter combines with the others.
func testListExpiredAt(t *testing.T, e *env) {
	deadlines := []struct {
		id    string
		state domain.State
		at    time.Duration // after start; 0: no deadline
	}{{"early", domain.StateReady, time.Minute}, {"exact", domain.StateBooting, 2 * time.Minute},
		{"late", domain.StateReady, 3 * time.Minute}, {"none", domain.StateReady, 0}}
	for _, d := range deadlines {
		in := instance(d.id, d.state)
		in.Deadline = time.Time{}
		if d.at != 0 {
			in.Deadline = start.Add(d.at)
		}
		e.create(in)
		e.clk.Advance(time.Millisecond)
	}
	// Another zone than the rows were written in: the store compares
	// instants.
	zone := time.FixedZone("UTC-5", -5*60*60)
	checkFilters(t, []filterCase[domain.InstanceFilter, string]{
		{"at a deadline", domain.InstanceFilter{ExpiredAt: start.Add(2 * time.Minute).In(zone)}, []string{"early", "exact"}},
		{"a nanosecond before it", domain.InstanceFilter{ExpiredAt: start.Add(2*time.Minute - 1)}, []string{"early"}},
		{"before every deadline", domain.InstanceFilter{ExpiredAt: start}, nil},
		{"after every deadline", domain.InstanceFilter{ExpiredAt: start.Add(time.Hour)}, []string{"early", "exact", "late"}},
		{"and a state", domain.InstanceFilter{ExpiredAt: start.Add(time.Hour), States: []domain.State{domain.StateReady}},
			[]string{"early", "late"}},
	}, func(f domain.InstanceFilter) []string { return ids(e.list(f)) })
}

func testListOrder(t *testing.T, e *env) {
	// One batch shares a CreatedAt, so ID breaks the tie; a later batch
	// sorts after it whatever its ids.
	e.create(instance("m", domain.StateReady), instance("c", domain.StateReady), instance("x", domain.StateReady))
	e.clk.Advance(time.Microsecond)
	e.create(instance("a", domain.StateReady))
	e.clk.Advance(time.Second)
	e.create(instance("b", domain.StateReady))
	// Updating a row must not move it: the order is by creation.
	e.move("c", readyUnbound, func(i *domain.Instance) { i.Reason = "touched" })

	want := []string{"c", "m", "x", "a", "b"}
	if got := ids(e.list(domain.InstanceFilter{})); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// Newest reverses the order, ties included; Limit keeps the first rows of
// that order, whichever filter picks them (several states, a pool, a field
// checked on the rows) and however few rows match.
func testListNewestAndLimit(t *testing.T, e *env) {
	rows := []struct {
		id, pool, runner string
		state            domain.State
		after            time.Duration // created this long after the row before
	}{
		{"m", "linux", "small", domain.StateReady, 0},
		{"c", "arm", "small", domain.StateReady, 0},
		{"x", "linux", "large", domain.StateBooting, 0},
		{"a", "arm", "large", domain.StateBooting, time.Microsecond},
		{"b", "linux", "small", domain.StateReady, time.Second},
	}
	for _, r := range rows {
		e.clk.Advance(r.after)
		in := instance(r.id, r.state)
		in.Pool, in.Runner = r.pool, r.runner
		e.create(in)
	}
	e.move("c", readyUnbound, func(i *domain.Instance) { i.Reason = "touched" })

	both := []domain.State{domain.StateReady, domain.StateBooting}
	checkFilters(t, []filterCase[domain.InstanceFilter, string]{
		{"oldest first", domain.InstanceFilter{}, []string{"c", "m", "x", "a", "b"}},
		{"newest first", domain.InstanceFilter{Newest: true}, []string{"b", "a", "x", "m", "c"}},
		{"oldest three", domain.InstanceFilter{Limit: 3}, []string{"c", "m", "x"}},
		{"newest three", domain.InstanceFilter{Limit: 3, Newest: true}, []string{"b", "a", "x"}},
		{"newest two of two states", domain.InstanceFilter{States: both, Newest: true, Limit: 2}, []string{"b", "a"}},
		{"oldest two of two states", domain.InstanceFilter{States: both, Limit: 2}, []string{"c", "m"}},
		{"newest two of a pool", domain.InstanceFilter{Pool: "linux", Newest: true, Limit: 2}, []string{"b", "x"}},
		{"newest of a runner", domain.InstanceFilter{Runner: "large", Newest: true, Limit: 1}, []string{"a"}},
		{"fewer than the limit", domain.InstanceFilter{States: []domain.State{domain.StateReady}, Newest: true, Limit: 10},
			[]string{"b", "m", "c"}},
		{"limit and no match", domain.InstanceFilter{Pool: "windows", Limit: 1}, nil},
	}, func(f domain.InstanceFilter) []string { return ids(e.list(f)) })
}

// terminate walks id from ready to terminated.
func (e *env) terminate(id string) {
	e.t.Helper()
	e.move(id, readyUnbound, to(domain.StateTerminating))
	e.move(id, domain.Guard{State: domain.StateTerminating}, to(domain.StateTerminated))
}

func testDeleteTerminated(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady), instance("b", domain.StateReady), instance("keep", domain.StateReady))
	e.terminate("a")
	e.terminate("b")
	if err := e.s.DeleteInstances(e.ctx, []string{"a", "b", "never-existed"}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	instanceRows.absent(t, e, "a")
	instanceRows.absent(t, e, "b")
	if err := e.s.DeleteInstances(e.ctx, nil); err != nil {
		t.Fatalf("delete nothing: %v", err)
	}
	if got := ids(e.list(domain.InstanceFilter{})); !slices.Equal(got, []string{"keep"}) {
		t.Fatalf("rows left: %v, want [keep]", got)
	}
}

func testDeleteRefuses(t *testing.T, e *env) {
	e.create(instance("done", domain.StateReady), instance("live", domain.StateReady), instance("busy", domain.StateReady))
	e.terminate("done")
	e.move("busy", readyUnbound, claim("job-1"))

	err := e.s.DeleteInstances(e.ctx, []string{"done", "live", "busy"})
	if err == nil {
		t.Fatal("deleting live rows succeeded")
	}
	for _, id := range []string{"live", "busy"} {
		if !strings.Contains(err.Error(), id) {
			t.Errorf("error %q does not name %s", err, id)
		}
	}
	if got := ids(e.list(domain.InstanceFilter{})); len(got) != 3 {
		t.Fatalf("rows after refused delete: %v, want all three", got)
	}
}
