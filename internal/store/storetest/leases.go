package storetest

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// acquire takes a lease and checks the outcome and the lease reported.
func (e *env) acquire(name, holder string, ttl time.Duration, wantOK bool, want domain.Lease) {
	e.t.Helper()
	got, ok, err := e.s.AcquireLease(e.ctx, name, holder, ttl)
	if err != nil {
		e.t.Fatalf("acquire %s for %s: %v", name, holder, err)
	}
	if ok != wantOK || got.Name != want.Name || got.Holder != want.Holder || !got.Expires.Equal(want.Expires) {
		e.t.Fatalf("acquire %s for %s at %v: got %+v %v, want %+v %v", name, holder, e.clk.Now(), got, ok, want, wantOK)
	}
}

func (e *env) release(name, holder string) {
	e.t.Helper()
	if err := e.s.ReleaseLease(e.ctx, name, holder); err != nil {
		e.t.Fatalf("release %s for %s: %v", name, holder, err)
	}
}

func testLeaseLifecycle(t *testing.T, e *env) {
	const name, ttl = "converger", 30 * time.Second
	lease := func(holder string, expires time.Time) domain.Lease {
		return domain.Lease{Name: name, Holder: holder, Expires: expires}
	}
	e.acquire(name, "a", ttl, true, lease("a", start.Add(ttl)))

	e.clk.Advance(10 * time.Second)
	e.acquire(name, "b", ttl, false, lease("a", start.Add(ttl)))
	// The holder renews from now.
	e.acquire(name, "a", ttl, true, lease("a", start.Add(40*time.Second)))

	e.clk.AdvanceTo(start.Add(40*time.Second - time.Microsecond))
	e.acquire(name, "b", ttl, false, lease("a", start.Add(40*time.Second)))
	// At its expiry the lease is free, as an instance is expired at its
	// deadline.
	e.clk.Advance(time.Microsecond)
	e.acquire(name, "b", ttl, true, lease("b", start.Add(70*time.Second)))
	e.acquire(name, "a", ttl, false, lease("b", start.Add(70*time.Second)))

	// Releasing a lease one does not hold changes nothing.
	e.release(name, "a")
	e.acquire(name, "c", ttl, false, lease("b", start.Add(70*time.Second)))

	e.release(name, "b")
	e.acquire(name, "c", time.Minute, true, lease("c", start.Add(100*time.Second)))
	e.release("never-taken", "c")
}

func testLeaseNames(t *testing.T, e *env) {
	e.acquire("converger", "a", time.Minute, true, domain.Lease{Name: "converger", Holder: "a", Expires: start.Add(time.Minute)})
	e.acquire("reaper", "b", time.Second, true, domain.Lease{Name: "reaper", Holder: "b", Expires: start.Add(time.Second)})
	e.release("reaper", "b")
	e.acquire("converger", "b", time.Minute, false, domain.Lease{Name: "converger", Holder: "a", Expires: start.Add(time.Minute)})
}

func testPoolStatus(t *testing.T, e *env) {
	got, err := e.s.ListPoolStatus(e.ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty store: %v, %v", got, err)
	}
	linux := domain.PoolStatus{
		Name: "linux", Schedule: "weekdays", Target: domain.Target{Hot: 3, Stopped: 2}, SpecHash: "abc123def456",
		Counts:    map[string]int{"hot/ready": 3, "stopped/stopped": 1},
		LastCycle: start.Add(1234567 * time.Microsecond),
	}
	arm := domain.PoolStatus{Name: "arm", Schedule: "default", Target: domain.Target{Hot: 1},
		LastCycle: start, LastError: "start instances: throttled"}
	for _, st := range []domain.PoolStatus{linux, arm} {
		if err := e.s.PutPoolStatus(e.ctx, st); err != nil {
			t.Fatalf("put %s: %v", st.Name, err)
		}
	}
	e.samePoolStatus(arm, linux)

	linux.Target.Hot, linux.Counts, linux.LastError = 5, map[string]int{"hot/ready": 5}, "late"
	if err := e.s.PutPoolStatus(e.ctx, linux); err != nil {
		t.Fatalf("replace linux: %v", err)
	}
	e.samePoolStatus(arm, linux)
}

// samePoolStatus fails unless the store lists exactly want, in order.
func (e *env) samePoolStatus(want ...domain.PoolStatus) {
	e.t.Helper()
	got, err := e.s.ListPoolStatus(e.ctx)
	if err != nil {
		e.t.Fatalf("list pool status: %v", err)
	}
	if len(got) != len(want) {
		e.t.Fatalf("got %d pool statuses, want %d: %+v", len(got), len(want), got)
	}
	for k := range want {
		g, w := got[k], want[k]
		if !g.LastCycle.Equal(w.LastCycle) {
			e.t.Fatalf("pool %s last cycle: got %v, want %v", w.Name, g.LastCycle, w.LastCycle)
		}
		g.LastCycle, w.LastCycle = time.Time{}, time.Time{}
		if len(g.Counts) == 0 && len(w.Counts) == 0 {
			g.Counts, w.Counts = nil, nil
		}
		if !equalStatus(g, w) {
			e.t.Fatalf("pool status %d: got %+v, want %+v", k, g, w)
		}
	}
}

func equalStatus(a, b domain.PoolStatus) bool {
	if a.Name != b.Name || a.Schedule != b.Schedule || a.Target != b.Target || a.SpecHash != b.SpecHash ||
		a.LastError != b.LastError || len(a.Counts) != len(b.Counts) {
		return false
	}
	for k, v := range a.Counts {
		if bv, ok := b.Counts[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func testClose(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady))
	if err := e.s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := e.s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	ctx, s := e.ctx, e.s
	calls := map[string]func() error{
		"CreateInstances": func() error { return s.CreateInstances(ctx, []domain.Instance{instance("b", domain.StateReady)}) },
		"GetInstance":     func() error { _, err := s.GetInstance(ctx, "a"); return err },
		"ListInstances":   func() error { _, err := s.ListInstances(ctx, domain.InstanceFilter{}); return err },
		"Transition":      func() error { _, err := s.Transition(ctx, "a", readyUnbound, claim("j")); return err },
		"TransitionBatch": func() error {
			_, err := s.TransitionBatch(ctx, []domain.TransitionRequest{{ID: "a", Guard: readyUnbound, Apply: claim("j")}})
			return err
		},
		"DeleteInstances": func() error { return s.DeleteInstances(ctx, []string{"a"}) },
		"PutPoolStatus":   func() error { return s.PutPoolStatus(ctx, domain.PoolStatus{Name: "p"}) },
		"ListPoolStatus":  func() error { _, err := s.ListPoolStatus(ctx); return err },
		"PutConfiguration": func() error {
			return s.PutConfiguration(ctx, domain.ConfigRecord{Source: "f", Data: []byte("pools: {}"), At: start})
		},
		"GetConfiguration": func() error { _, _, err := s.GetConfiguration(ctx, "f"); return err },
		"AcquireLease":     func() error { _, _, err := s.AcquireLease(ctx, "l", "h", time.Minute); return err },
		"ReleaseLease":     func() error { return s.ReleaseLease(ctx, "l", "h") },
		"RecordHeartbeat":  func() error { return s.RecordHeartbeat(ctx, "a", start) },
		"CreateJobs":       func() error { _, err := s.CreateJobs(ctx, []domain.Job{job(1, domain.JobQueued)}); return err },
		"GetJob":           func() error { _, err := s.GetJob(ctx, 1); return err },
		"ListJobs":         func() error { _, err := s.ListJobs(ctx, domain.JobFilter{}); return err },
		"TransitionJob":    func() error { _, err := s.TransitionJob(ctx, 1, queuedGuard, assign("a")); return err },
		"TransitionJobs": func() error {
			_, err := s.TransitionJobs(ctx, []domain.JobTransitionRequest{{ID: 1, Guard: queuedGuard, Apply: assign("a")}})
			return err
		},
		"DeleteJobs": func() error { _, err := s.DeleteJobs(ctx, start); return err },
	}
	for name, call := range calls {
		if err := call(); err == nil {
			t.Errorf("%s after Close succeeded", name)
		}
	}
}
