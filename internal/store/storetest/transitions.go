package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func testTransitionClaims(t *testing.T, e *env) {
	in := instance("a", domain.StateReady)
	e.create(in)
	e.clk.Advance(2*time.Second + 3*time.Microsecond)
	now := e.clk.Now()
	deadline := now.Add(5 * time.Minute)

	got := e.move("a", readyUnbound, func(i *domain.Instance) {
		claim("run-9999")(i)
		i.Deadline = deadline
	})
	want := created(in, start)
	want.State, want.Job, want.Deadline = domain.StateClaimed, "run-9999", deadline
	want.Version, want.UpdatedAt, want.StateSince = 2, now, now
	sameInstance(t, "returned instance", got, want)
	sameInstance(t, "stored instance", e.get("a"), want)
}

func testTransitionGuards(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady))
	e.move("a", readyUnbound, claim("job-1"))
	before := e.get("a") // claimed, job-1, version 2
	actual := domain.Guard{State: domain.StateClaimed, Job: "job-1", Version: 2}

	refused := []struct {
		name  string
		guard domain.Guard
	}{
		{"other state", domain.Guard{State: domain.StateReady, Job: "job-1"}},
		{"other job", domain.Guard{State: domain.StateClaimed, Job: "job-2"}},
		{"unbound while bound", domain.Guard{State: domain.StateClaimed}},
		{"stale version", domain.Guard{State: domain.StateClaimed, Job: "job-1", Version: 1}},
		{"future version", domain.Guard{State: domain.StateClaimed, Job: "job-1", Version: 3}},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			e.clk.Advance(time.Second)
			_, err := e.s.Transition(e.ctx, "a", c.guard, to(domain.StateRunning))
			refusedAs(t, err, domain.ErrConflict, domain.ConflictError{ID: "a", Want: c.guard, Actual: actual})
			e.unchanged(before)
		})
	}

	// Version 0 matches any version; an exact version matches itself.
	got := e.move("a", domain.Guard{State: domain.StateClaimed, Job: "job-1"}, func(i *domain.Instance) { i.Reason = "any" })
	if got.Version != 3 {
		t.Fatalf("version after any-version guard: %d, want 3", got.Version)
	}
	got = e.move("a", domain.Guard{State: domain.StateClaimed, Job: "job-1", Version: 3}, to(domain.StateRunning))
	if got.Version != 4 || got.State != domain.StateRunning {
		t.Fatalf("after exact-version guard: %+v", got)
	}
}

func testTransitionIllegal(t *testing.T, e *env) {
	cases := []struct {
		name     string
		from, to domain.State
	}{
		{"ready to running skips the claim", domain.StateReady, domain.StateRunning},
		{"ready back to booting", domain.StateReady, domain.StateBooting},
		{"pending straight to ready", domain.StatePending, domain.StateReady},
		{"stopped to ready without a claim", domain.StateStopped, domain.StateReady},
		{"running back to ready without release", domain.StateRunning, domain.StateReady},
		{"error back to ready", domain.StateError, domain.StateReady},
		{"terminated rewritten in place", domain.StateTerminated, domain.StateTerminated},
		{"terminated revived", domain.StateTerminated, domain.StateTerminating},
		{"unknown target state", domain.StateReady, domain.State("idle")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := "x-" + string(c.from) + "-" + string(c.to)
			e.create(instance(id, c.from))
			before := e.get(id)
			e.clk.Advance(time.Second)
			_, err := e.s.Transition(e.ctx, id, domain.Guard{State: c.from}, func(i *domain.Instance) {
				i.State, i.Reason = c.to, "should not be written"
			})
			refusedAs(t, err, nil, domain.TransitionError{ID: id, From: c.from, To: c.to})
			e.unchanged(before)
		})
	}
}

func testTransitionNotFound(t *testing.T, e *env) {
	_, err := e.s.Transition(e.ctx, "ghost", readyUnbound, claim("job-1"))
	if !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	instanceRows.empty(t, e, "transition of a missing row")
}

func testTransitionInPlace(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady))
	e.clk.Advance(90 * time.Second)
	got := e.move("a", readyUnbound, func(i *domain.Instance) { i.Reason, i.JobsServed = "noted", 3 })
	if got.State != domain.StateReady || got.Reason != "noted" || got.JobsServed != 3 {
		t.Fatalf("rewrite not applied: %+v", got)
	}
	if got.Version != 2 || !got.StateSince.Equal(start) || !got.UpdatedAt.Equal(e.clk.Now()) {
		t.Fatalf("in-place rewrite: version %d state since %v updated %v; want 2, %v, %v",
			got.Version, got.StateSince, got.UpdatedAt, start, e.clk.Now())
	}
	sameInstance(t, "stored instance", e.get("a"), got)
}

func testTransitionBookkeeping(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady))
	e.clk.Advance(time.Minute)
	got := e.move("a", readyUnbound, func(i *domain.Instance) {
		claim("job-1")(i)
		i.ID, i.Version = "hijack", 99
		i.CreatedAt, i.UpdatedAt = start.Add(time.Hour), start.Add(time.Hour)
	})
	if got.ID != "a" || got.Version != 2 || !got.CreatedAt.Equal(start) || !got.UpdatedAt.Equal(e.clk.Now()) {
		t.Fatalf("bookkeeping taken from fn: %+v", got)
	}
	sameInstance(t, "stored instance", e.get("a"), got)
	instanceRows.absent(t, e, "hijack")
}

func testTransitionEveryField(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady))
	e.clk.Advance(time.Second)
	later := e.clk.Now().Add(7*time.Minute + 11*time.Microsecond)
	got := e.move("a", readyUnbound, func(i *domain.Instance) {
		i.CloudID, i.Pool, i.Role, i.Runner = "i-new", "arm", domain.RoleStopped, "large"
		i.SpecHash, i.LaunchID = "ffff00001111", "launch-2"
		i.State, i.Job, i.JobStarted = domain.StateClaimed, "job-9", true
		i.Deadline, i.RunningSince = later, later.Add(-time.Hour)
		i.JobsServed, i.Reason = 5, "reused"
		i.InstanceType, i.UsageClass, i.CPU, i.MemoryMiB = "m7g.xlarge", "on-demand", 4, 16384
		i.Heartbeat = later.Add(-time.Minute)
		i.RunnerName, i.RunnerConfig = "bp-a-9", "jit-config-of-job-9"
	})
	sameInstance(t, "stored instance", e.get("a"), got)
	if got.CloudID != "i-new" || got.JobsServed != 5 || !got.Deadline.Equal(later) || !got.JobStarted ||
		!got.Heartbeat.Equal(later.Add(-time.Minute)) || got.RunnerName != "bp-a-9" || got.RunnerConfig != "jit-config-of-job-9" {
		t.Fatalf("fields not written: %+v", got)
	}
}

func testTransitionLifecycle(t *testing.T, e *env) {
	e.create(instance("a", domain.StatePending))
	steps := []struct {
		state domain.State
		job   string
	}{
		{domain.StateBooting, ""}, {domain.StateReady, ""}, {domain.StateReady, ""},
		{domain.StateClaimed, "job-1"}, {domain.StateRunning, "job-1"}, {domain.StateRunning, "job-1"},
		{domain.StateReleasing, "job-1"}, {domain.StateReady, ""}, {domain.StateStopping, ""},
		{domain.StateStopped, ""}, {domain.StateClaimed, "job-2"}, {domain.StateError, "job-2"},
		{domain.StateTerminating, "job-2"}, {domain.StateTerminated, "job-2"},
	}
	prev := e.get("a")
	for k, st := range steps {
		e.clk.Advance(time.Duration(k+1) * 1001 * time.Microsecond)
		now := e.clk.Now()
		got := e.move("a", domain.GuardOf(prev), func(i *domain.Instance) { i.State, i.Job = st.state, st.job })
		wantSince := prev.StateSince
		if st.state != prev.State {
			wantSince = now
		}
		if got.Version != prev.Version+1 || !got.StateSince.Equal(wantSince) || !got.UpdatedAt.Equal(now) {
			t.Fatalf("step %d (%s -> %s): version %d state since %v updated %v; want %d, %v, %v",
				k, prev.State, st.state, got.Version, got.StateSince, got.UpdatedAt, prev.Version+1, wantSince, now)
		}
		sameInstance(t, "stored instance", e.get("a"), got)
		prev = got
	}
}
