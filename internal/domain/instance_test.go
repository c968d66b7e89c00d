package domain

import (
	"errors"
	"testing"
	"time"
)

func TestTransitionTable(t *testing.T) {
	allowed := map[[2]State]bool{}
	for from, tos := range transitions {
		for _, to := range tos {
			allowed[[2]State{from, to}] = true
		}
	}
	// Every pair of states is either in the table, a self-rewrite, or refused.
	for _, from := range States {
		for _, to := range States {
			want := allowed[[2]State{from, to}] || (from == to && from != StateTerminated)
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	if CanTransition("bogus", StateReady) || CanTransition(StateReady, "bogus") {
		t.Error("unknown states must not transition")
	}
	// Every state but the terminal one can reach terminated.
	for _, s := range States {
		if !reaches(s, StateTerminated, map[State]bool{}) {
			t.Errorf("%s cannot reach terminated", s)
		}
	}
	// Key edges of the design.
	for _, e := range [][2]State{
		{StateReady, StateClaimed}, {StateStopped, StateClaimed}, {StateClaimed, StateReady},
		{StateRunning, StateReleasing}, {StateReleasing, StateReady}, {StateClaimed, StateStopped},
	} {
		if !CanTransition(e[0], e[1]) {
			t.Errorf("%s -> %s must be allowed", e[0], e[1])
		}
	}
	for _, e := range [][2]State{
		{StateTerminated, StateReady}, {StateRunning, StateReady}, {StateRunning, StateClaimed},
		{StateError, StateReady}, {StatePending, StateReady}, {StateBooting, StateClaimed}, {StateStopped, StateRunning},
	} {
		if CanTransition(e[0], e[1]) {
			t.Errorf("%s -> %s must be refused", e[0], e[1])
		}
	}
}

func reaches(from, to State, seen map[State]bool) bool {
	if from == to {
		return true
	}
	if seen[from] {
		return false
	}
	seen[from] = true
	for _, n := range transitions[from] {
		if reaches(n, to, seen) {
			return true
		}
	}
	return false
}

func TestApplyTransition(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cur := Instance{ID: "a", State: StateReady, Version: 3, CreatedAt: now.Add(-time.Hour), StateSince: now.Add(-time.Minute)}

	next, err := ApplyTransition(cur, Guard{State: StateReady}, now, func(i *Instance) {
		i.State, i.Job = StateClaimed, "job-1"
		i.ID, i.Version = "hijack", 99 // ignored: the store owns these
	})
	if err != nil {
		t.Fatal(err)
	}
	if next.ID != "a" || next.Version != 4 || next.Job != "job-1" || !next.StateSince.Equal(now) || !next.UpdatedAt.Equal(now) {
		t.Fatalf("unexpected result %+v", next)
	}

	_, err = ApplyTransition(cur, Guard{State: StateReady, Version: 2}, now, func(i *Instance) { i.State = StateClaimed })
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) {
		t.Fatalf("stale version: got %v", err)
	}
	_, err = ApplyTransition(cur, Guard{State: StateReady, Job: "x"}, now, func(i *Instance) { i.State = StateClaimed })
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("wrong job: got %v", err)
	}
	_, err = ApplyTransition(cur, GuardOf(cur), now, func(i *Instance) { i.State = StateRunning })
	var te *TransitionError
	if !errors.As(err, &te) || te.From != StateReady || te.To != StateRunning {
		t.Fatalf("illegal transition: got %v", err)
	}
	same, err := ApplyTransition(cur, GuardOf(cur), now, func(i *Instance) { i.Reason = "note" })
	if err != nil || !same.StateSince.Equal(cur.StateSince) || same.Version != 4 {
		t.Fatalf("in-place rewrite: %+v %v", same, err)
	}
}

func TestDetachedAndExpired(t *testing.T) {
	now := time.Now()
	cases := []struct {
		i    Instance
		want bool
	}{
		{Instance{State: StateReady}, false},
		{Instance{State: StateStopped}, false},
		{Instance{State: StateClaimed}, true},
		{Instance{State: StateRunning}, true},
		{Instance{State: StateReleasing}, true},
		{Instance{State: StateReady, JobStarted: true}, true},
		{Instance{State: StateBooting, Job: "j"}, true},
	}
	for _, c := range cases {
		if got := c.i.Detached(); got != c.want {
			t.Errorf("%+v Detached = %v", c.i, got)
		}
	}
	if (Instance{}).Expired(now) {
		t.Error("zero deadline must never expire")
	}
	if !(Instance{Deadline: now}).Expired(now) || (Instance{Deadline: now.Add(time.Second)}).Expired(now) {
		t.Error("deadline boundary wrong")
	}
}

func TestChunk(t *testing.T) {
	ids := make([]int, 120)
	got := Chunk(ids, 50)
	if len(got) != 3 || len(got[0]) != 50 || len(got[2]) != 20 {
		t.Fatalf("chunks %d", len(got))
	}
	if Chunk([]int{}, 50) != nil {
		t.Fatal("empty input must give no chunks")
	}
}

func TestSpecHashCoversWhatShapesAnInstance(t *testing.T) {
	r := RunnerSpec{Name: "small", Image: "ubuntu24", CPU: Range{2, 2}}
	p := Pool{Name: "p", Runner: "small", HotIdleLifetime: DefaultHotIdleLifetime}
	base := SpecHash(r, "ami-1", p)
	if SpecHash(r, "ami-1", p) != base {
		t.Fatal("hash is not deterministic")
	}
	r2 := r
	r2.CPU = Range{4, 4}
	p2 := p
	p2.Name = "q"
	p3 := p
	p3.Schedule = []ScheduleEntry{{Name: "x", Hot: 3}}
	p3.Timezone = "Europe/Paris"
	for name, h := range map[string]string{
		"runner": SpecHash(r2, "ami-1", p), "image": SpecHash(r, "ami-2", p), "pool name": SpecHash(r, "ami-1", p2),
	} {
		if h == base {
			t.Errorf("changing the %s did not change the hash", name)
		}
	}
	if SpecHash(r, "ami-1", p3) != base {
		t.Error("a schedule or timezone edit must not roll the pool")
	}
	r3 := r
	r3.Retry = RetryNever
	if SpecHash(r3, "ami-1", p) != base {
		t.Error("retry is the control plane's, not the machine's: it must not roll the pool")
	}
	// What the control plane does with the machines it has reaches none of
	// them: editing it must not roll the pool.
	for name, edit := range map[string]func(*Pool){
		"hot-idle-lifetime":     func(p *Pool) { p.HotIdleLifetime = time.Minute },
		"reuse":                 func(p *Pool) { p.Reuse = true },
		"max-jobs-per-instance": func(p *Pool) { p.MaxJobsPerInstance = 30 },
		"max-age":               func(p *Pool) { p.MaxAge = time.Hour },
		"environment":           func(p *Pool) { p.Environment = "staging" },
		"autoscale":             func(p *Pool) { p.Autoscale = &AutoscaleSpec{Max: 5} },
	} {
		p4 := p
		edit(&p4)
		if SpecHash(r, "ami-1", p4) != base {
			t.Errorf("editing %s rolls the pool", name)
		}
	}
}
