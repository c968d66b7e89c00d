package converger

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// brokenWarmUp turns the warm signal of every machine into the failure its
// agent reports when the warm-up command exits non-zero, while broken.
type brokenWarmUp struct {
	next   domain.SignalSink
	broken *atomic.Bool
}

func (b brokenWarmUp) Signal(ctx context.Context, s domain.Signal) error {
	if s.Kind == domain.SignalWarm && b.broken.Load() {
		s.Kind, s.Reason = domain.SignalFailed, "warm-up: exit status 1"
	}
	return b.next.Signal(ctx, s)
}

// newBrokenWorld is a world whose warm-ups fail while the returned switch
// is on (it starts on).
func newBrokenWorld(t *testing.T, target domain.Target, opts Options) (*world, *atomic.Bool) {
	t.Helper()
	broken := &atomic.Bool{}
	broken.Store(true)
	w := newWorldSignals(t, target, sim.Options{Latency: latency}, opts, func(next domain.SignalSink) domain.SignalSink {
		return brokenWarmUp{next: next, broken: broken}
	})
	return w, broken
}

func (w *world) status() domain.PoolStatus {
	w.T.Helper()
	st, err := w.Store.ListPoolStatus(context.Background())
	if err != nil || len(st) != 1 {
		w.T.Fatalf("pool status %+v %v", st, err)
	}
	return st[0]
}

func (w *world) warmUpFailures() float64 {
	return testutil.ToFloat64(w.conv.metrics.warmUpFailures.WithLabelValues("p"))
}

func TestCreateBackoffDoublesUpToItsCap(t *testing.T) {
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute,
		10 * time.Minute, 10 * time.Minute}
	for i, d := range want {
		if got := createBackoff(i + 1); got != d {
			t.Errorf("after %d failures: %s, want %s", i+1, got, d)
		}
	}
	if got := createBackoff(1000); got != maxCreateBackoff {
		t.Errorf("after 1000 failures: %s", got)
	}
}

// A pool whose every warm-up fails has each failed member terminated; its
// replacements are launched ever more slowly, not at every cycle, and the
// pool's status, log and metrics say why. Once the warm-up works again, the
// pool fills within a backoff and the failures are forgotten.
func TestWarmUpsThatAlwaysFailBackOffThePoolsCreates(t *testing.T) {
	w, broken := newBrokenWorld(t, domain.Target{Hot: 2, Stopped: 3}, Options{})
	logs := w.logs()
	var last PoolReport
	for range 120 { // an hour
		last = w.cycle()
		w.Clock.Pass(30 * time.Second)
	}
	launched := len(w.rows())
	calls := w.cloud.Calls()[sim.OpCreateFleet]
	// Without a backoff: a round of 5 every other cycle, 300 machines and
	// 120 calls. With it: a round of 5 at 0, 9, 20 min and every 11 min
	// after (the cap, and the boot and warm-up of the round).
	if launched > 35 || calls > 14 {
		t.Fatalf("an hour of failing warm-ups launched %d machines in %d CreateFleet calls", launched, calls)
	}
	if !errors.Is(last.Err, ErrWarmUpsFailing) {
		t.Fatalf("report err %v", last.Err)
	}
	if st := w.status(); !strings.Contains(st.LastError, ErrWarmUpsFailing.Error()) ||
		!strings.Contains(st.LastError, "warm-up: exit status 1") {
		t.Fatalf("pool status last error %q", st.LastError)
	}
	if failed, counted := launched-len(w.rows(domain.StatePending, domain.StateBooting)), w.warmUpFailures(); counted != float64(failed) {
		t.Fatalf("counted %v failed warm-ups; %d machines failed", counted, failed)
	}
	errs := logs.Lines("level=ERROR", "fails before it warms", "pool=p")
	warns := logs.Lines("level=WARN", "failed before they warmed", "pool=p")
	if len(errs) != 1 || len(warns) == 0 || len(warns)+len(errs) > calls/2 {
		t.Fatalf("%d ERROR and %d WARN lines for %d rounds of creates, want one ERROR and a WARN a round:\n%s",
			len(errs), len(warns), calls/2, logs)
	}

	broken.Store(false)
	r := w.converge(int(maxCreateBackoff/(30*time.Second)) + 4) // the backoff left, a boot and a warm-up
	if r.Err != nil || w.status().LastError != "" {
		t.Fatalf("once warm-ups work: err %v, status %q", r.Err, w.status().LastError)
	}
	if n := len(logs.Lines("level=INFO", "no longer held", "pool=p")); n != 1 {
		t.Fatalf("%d lines saying the creates are no longer held", n)
	}
}

// After a member warmed, the next failure starts the backoff afresh.
func TestAWarmMemberEndsTheFailureStreak(t *testing.T) {
	w, broken := newBrokenWorld(t, domain.Target{Hot: 1}, Options{})
	for range 3 { // create; booting; failed (held 30 s)
		w.cycle()
		w.Clock.Pass(30 * time.Second)
	}
	if r := w.cycle(); !errors.Is(r.Err, ErrWarmUpsFailing) || Describe(r.Plan) != "create/hot×1" {
		t.Fatalf("30 s after the first failure: err %v plan %q", r.Err, Describe(r.Plan))
	}
	broken.Store(false)
	w.converge(4)
	broken.Store(true)
	w.edit(func(ps *PoolSpec) { ps.Pool.Schedule[0].Hot = 2 })
	w.cycleUntilPlanned(1) // creates the second member
	for range 2 {
		w.Clock.Pass(30 * time.Second)
		w.cycle()
	}
	st := w.status()
	if !strings.Contains(st.LastError, " 1 in a row") {
		t.Fatalf("after a member warmed, a failure should start a new streak: %q", st.LastError)
	}
	w.Clock.Pass(30 * time.Second)
	if r := w.cycle(); Describe(r.Plan) != "create/hot×1" {
		t.Fatalf("30 s after the first failure of the new streak: plan %q", Describe(r.Plan))
	}
}

// A change of the pool's spec (a new image, a fixed runner) is tried at once,
// whatever the old spec's warm-ups did.
func TestSpecChangeEndsTheBackoff(t *testing.T) {
	w, _ := newBrokenWorld(t, domain.Target{Hot: 5}, Options{})
	for range 3 {
		w.cycle()
		w.Clock.Pass(30 * time.Second)
	}
	if r := w.cycle(); !r.Plan.Empty() || !errors.Is(r.Err, ErrWarmUpsFailing) {
		t.Fatalf("5 failures: plan %q err %v, want creates held", Describe(r.Plan), r.Err)
	}
	w.edit(func(ps *PoolSpec) { ps.Runner.Image = "ubuntu24-fixed" })
	w.Clock.Pass(30 * time.Second)
	if r := w.cycle(); Describe(r.Plan) != "create/hot×5" || r.Err != nil {
		t.Fatalf("after the spec changed: plan %q err %v", Describe(r.Plan), r.Err)
	}
}

// Only the replica converging follows warm-ups. One that takes the
// converger back after another had it does not hold creates on failures it
// saw before, which the other has seen end since. As in serve, whose loop
// runner holds the converger's lease around its loop, one converger cycles
// at a time and a replica without the lease is not called at all.
func TestReplicaTakingTheConvergerBackForgetsOldWarmUpFailures(t *testing.T) {
	w, broken := newBrokenWorld(t, domain.Target{Hot: 5}, Options{})
	other, err := New(w.Store, w.cloud, w.Clock, w.pools, w.Log, nil, Options{ControllerID: "test", LeaseTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		w.cycle()
		w.Clock.Pass(30 * time.Second)
	}
	if r := w.cycle(); !r.Plan.Empty() || !errors.Is(r.Err, ErrWarmUpsFailing) {
		t.Fatalf("5 failures: plan %q err %v, want creates held for 8 min", Describe(r.Plan), r.Err)
	}
	broken.Store(false)

	w.Clock.Pass(time.Minute) // the lease lapses; the other replica converges, and the members warm
	for range 4 {
		if _, err := other.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		w.Clock.Pass(30 * time.Second)
	}
	if n := len(w.rows(domain.StateReady)); n != 5 {
		t.Fatalf("%d members ready under the other replica", n)
	}

	w.Clock.Pass(time.Minute) // the lease comes back, well within the old backoff
	w.setTarget(domain.Target{Hot: 6})
	if r := w.cycle(); Describe(r.Plan) != "create/hot×1" || r.Err != nil {
		t.Fatalf("back with the converger: plan %q err %v", Describe(r.Plan), r.Err)
	}
}

// A member that warmed ends the streak even when another failed in the
// same cycle, whichever the listing gives first; a member of an older spec
// counts for nothing.
func TestWarmUpObservationOfOneCycle(t *testing.T) {
	member := func(id, hash string, s domain.State) domain.Instance {
		return domain.Instance{ID: id, Pool: "p", Role: domain.RoleHot, SpecHash: hash, State: s, Reason: "warm-up: exit status 1"}
	}
	for _, order := range [][2]int{{0, 1}, {1, 0}} {
		w := newWarmups()
		w.launched("p", []domain.Instance{member("a", "h", domain.StatePending), member("b", "h", domain.StatePending),
			member("old", "g", domain.StatePending)})
		ch := w.observe("p", "h", []domain.Instance{member("a", "h", domain.StateBooting), member("b", "h", domain.StateBooting),
			member("old", "g", domain.StateError)}, start)
		if ch.failed != 0 || ch.after.failures != 0 {
			t.Fatalf("an outdated member's failure counted: %+v", ch)
		}
		rows := []domain.Instance{member("a", "h", domain.StateError), member("b", "h", domain.StateReady)}
		ch = w.observe("p", "h", []domain.Instance{rows[order[0]], rows[order[1]]}, start)
		if ch.failed != 1 || !ch.warmed || ch.grew() || ch.after.failures != 0 || ch.after.holds(start) {
			t.Fatalf("listing order %v: %+v", order, ch)
		}
	}
}
