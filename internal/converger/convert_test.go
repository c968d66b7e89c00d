package converger

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/rebalance"
)

// ids are the ids of insts, sorted.
func ids(insts []domain.Instance) []string {
	out := make([]string, len(insts))
	for i, in := range insts {
		out[i] = in.ID
	}
	slices.Sort(out)
	return out
}

// parkedPair is a world whose pool has converged on two parked members,
// with those members; the cloud's call counts start after their making.
func parkedPair(t *testing.T) (*world, []domain.Instance) {
	t.Helper()
	w := newWorld(t, domain.Target{Stopped: 2}, sim.Options{Latency: latency}, Options{})
	w.converge(10)
	parked := w.rows(domain.StateStopped)
	w.cloud.ResetCalls()
	return w, parked
}

// A schedule that swaps stopped capacity for hot capacity, and back, starts
// and stops the same machines: no machine is terminated or launched.
func TestScheduleFlipConvertsMembers(t *testing.T) {
	w, parked := parkedPair(t)

	w.setTarget(domain.Target{Hot: 2})
	r := w.cycle()
	if got := Describe(r.Plan); got != "start/convert×2" {
		t.Fatalf("stopped 2 → hot 2 plans %q", got)
	}
	for _, in := range w.rows(domain.StateBooting) {
		if in.Role != domain.RoleHot || !in.RunningSince.Equal(w.Clock.Now()) {
			t.Fatalf("started member %+v, want a hot member booting since the start", in)
		}
	}
	w.converge(5)
	if got := ids(w.rows(domain.StateReady)); !slices.Equal(got, ids(parked)) || w.readyHot() != 2 {
		t.Fatalf("ready hot %v, want the parked members %v", got, ids(parked))
	}
	w.wantCalls(map[string]int{sim.OpStartInstances: 1, sim.OpCreateFleet: 0, sim.OpTerminateInstances: 0})
	if got := w.actions("start", "convert", "ok"); got != 2 {
		t.Fatalf("starts counted %v", got)
	}

	w.setTarget(domain.Target{Stopped: 2})
	if got := Describe(w.cycle().Plan); got != "stop/convert×2" {
		t.Fatalf("hot 2 → stopped 2 plans %q", got)
	}
	w.converge(5)
	if got := ids(w.rows(domain.StateStopped)); !slices.Equal(got, ids(parked)) {
		t.Fatalf("parked %v, want the same members %v", got, ids(parked))
	}
	for _, in := range w.rows(domain.StateStopped) {
		if in.Role != domain.RoleStopped {
			t.Fatalf("parked member %s has role %s", in.ID, in.Role)
		}
	}
	w.wantCalls(map[string]int{sim.OpStopInstances: 1, sim.OpCreateFleet: 0, sim.OpTerminateInstances: 0})
	if got := w.actions("stop", "convert", "ok"); got != 2 {
		t.Fatalf("stops counted %v", got)
	}
}

// Conversions go to the cloud in calls of at most MaxBatch ids.
func TestConversionsGoInBatches(t *testing.T) {
	w := newWorld(t, domain.Target{Stopped: 120}, sim.Options{}, Options{})
	w.converge(5)
	w.cloud.ResetCalls()
	w.setTarget(domain.Target{Hot: 120})
	if got := Describe(w.cycle().Plan); got != "start/convert×120" {
		t.Fatalf("plan %q", got)
	}
	w.converge(5)
	w.setTarget(domain.Target{Stopped: 120})
	if got := Describe(w.cycle().Plan); got != "stop/convert×120" {
		t.Fatalf("plan %q", got)
	}
	calls, most := w.cloud.Calls(), w.cloud.MaxIDsPerCall()
	for _, op := range []string{sim.OpStartInstances, sim.OpStopInstances} {
		if calls[op] != 3 || most[op] > domain.MaxBatch {
			t.Errorf("%s: %d calls, at most %d ids", op, calls[op], most[op])
		}
	}
}

// A spot machine cannot be stopped: a spot runner's hot members are
// replaced by on-demand stopped ones, not parked.
func TestSpotHotMembersAreNotStopped(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 2}, sim.Options{Latency: latency}, Options{})
	w.edit(func(ps *PoolSpec) { ps.Runner.Spot = "price-capacity-optimized" })
	w.converge(5)
	w.cloud.ResetCalls()
	w.setTarget(domain.Target{Stopped: 2})
	if got := Describe(w.cycle().Plan); got != "create/stopped×2 terminate/excess×2" {
		t.Fatalf("plan %q", got)
	}
	if n := w.cloud.Calls()[sim.OpStopInstances]; n != 0 {
		t.Fatalf("%d stop calls for spot machines", n)
	}
}

// claimRace claims one instance for a job just before the converger's
// first batch of row changes lands.
type claimRace struct {
	domain.Store
	once   sync.Once
	victim domain.Instance
	err    error
}

func (s *claimRace) TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error) {
	s.once.Do(func() {
		r := domain.NewLifecycle(domain.Deadlines{}).Claim(s.victim, "job-1", s.victim.UpdatedAt)
		_, s.err = s.Store.Transition(ctx, r.ID, r.Guard, r.Apply)
	})
	return s.Store.TransitionBatch(ctx, reqs)
}

// A job that claims a member while it is being converted keeps it: the
// conversion of that member is skipped, the others go ahead.
func TestClaimWinsOverAConversion(t *testing.T) {
	for _, c := range []struct {
		name         string
		from, to     domain.Target
		members      domain.State // the state the converted members wait in
		plan, action string
		claimedRole  domain.Role       // the claimed member keeps its role
		machine      domain.CloudState // and its machine its state
		otherState   domain.State      // the other member goes ahead
		otherRole    domain.Role
	}{
		{"to stopped", domain.Target{Hot: 2}, domain.Target{Stopped: 2}, domain.StateReady, "stop/convert×2", "stop",
			domain.RoleHot, domain.CloudRunning, domain.StateStopping, domain.RoleStopped},
		// The claimed member's machine stays stopped: its job's dispatcher
		// starts it, not the converger.
		{"to hot", domain.Target{Stopped: 2}, domain.Target{Hot: 2}, domain.StateStopped, "start/convert×2", "start",
			domain.RoleStopped, domain.CloudStopped, domain.StateBooting, domain.RoleHot},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, c.from, sim.Options{Latency: latency}, Options{})
			w.converge(10)
			members := w.rows(c.members)
			rs := &claimRace{Store: w.Store, victim: members[0]}
			w.conv.store = rs
			w.setTarget(c.to)
			if got := Describe(w.cycle().Plan); got != c.plan {
				t.Fatalf("plan %q, want %q", got, c.plan)
			}
			if rs.err != nil {
				t.Fatal(rs.err)
			}
			claimed, _ := w.Store.GetInstance(context.Background(), members[0].ID)
			if claimed.State != domain.StateClaimed || claimed.Job != "job-1" || claimed.Role != c.claimedRole {
				t.Fatalf("claimed member became %+v", claimed)
			}
			if m, _ := w.cloud.Get(claimed.CloudID); m.State != c.machine {
				t.Fatalf("claimed member's machine is %s, want %s", m.State, c.machine)
			}
			other, _ := w.Store.GetInstance(context.Background(), members[1].ID)
			if other.State != c.otherState || other.Role != c.otherRole {
				t.Fatalf("the other member is %s %s, want %s %s", other.State, other.Role, c.otherRole, c.otherState)
			}
			if ok, conflict := w.actions(c.action, "convert", "ok"), w.actions(c.action, "convert", "conflict"); ok != 1 || conflict != 1 {
				t.Fatalf("conversions counted %v ok, %v conflict; want 1 and 1", ok, conflict)
			}
		})
	}
}

// A start the cloud refuses for capacity leaves the members parked, and the
// pool creates its hot members instead until the hold ends.
func TestStartRefusedForCapacityCreatesInstead(t *testing.T) {
	w, parked := parkedPair(t)
	w.cloud.FailNext(sim.OpStartInstances, 1, domain.ErrInsufficientCapacity)
	w.setTarget(domain.Target{Hot: 2})
	r := w.cycle()
	if got := Describe(r.Plan); got != "start/convert×2" {
		t.Fatalf("plan %q", got)
	}
	if !errors.Is(r.Err, domain.ErrInsufficientCapacity) {
		t.Fatalf("pool error %v, want the capacity refusal", r.Err)
	}
	if got := ids(w.rows(domain.StateStopped)); !slices.Equal(got, ids(parked)) {
		t.Fatalf("parked after the refusal %v, want %v", got, ids(parked))
	}
	for i, in := range w.rows(domain.StateStopped) {
		if in.Role != domain.RoleStopped || !in.Deadline.Equal(parked[i].Deadline) || !in.RunningSince.IsZero() {
			t.Fatalf("refused member %+v, want it parked as it was", in)
		}
	}
	if got := w.actions("start", "convert", "error"); got != 2 {
		t.Fatalf("refused starts counted %v", got)
	}
	w.Clock.Pass(30 * time.Second)
	// The parked members stay until the hot members created are ready.
	if got := Describe(w.cycle().Plan); got != "create/hot×2" {
		t.Fatalf("plan after the refusal %q", got)
	}
	w.converge(5)
}

// kept is the pool's count of members kept for why.
func (w *world) kept(why rebalance.Reason) float64 {
	return testutil.ToFloat64(w.conv.metrics.kept.vec.WithLabelValues("p", string(why)))
}

// While a pool's starts are held and its creates find no capacity either,
// the parked members its hot target would take are kept: they are all the
// pool has. Once the hot members created are ready, they go as excess.
func TestParkedMembersOutlastStartsAndCreatesRefused(t *testing.T) {
	w, parked := parkedPair(t)
	logs := w.logs()
	w.cloud.FailNext(sim.OpStartInstances, 1, domain.ErrInsufficientCapacity)
	w.cloud.FailNext(sim.OpCreateFleet, 5, domain.ErrInsufficientCapacity)
	w.setTarget(domain.Target{Hot: 2})
	if got := Describe(w.cycle().Plan); got != "start/convert×2" {
		t.Fatalf("plan %q", got)
	}
	for cycle := 1; cycle <= 4; cycle++ {
		w.Clock.Pass(30 * time.Second)
		r := w.cycle()
		if got := Describe(r.Plan); got != "create/hot×2" || !errors.Is(r.Err, domain.ErrInsufficientCapacity) {
			t.Fatalf("cycle %d after the refusal: plan %q, error %v", cycle, got, r.Err)
		}
		if got := ids(w.rows(domain.StateStopped)); !slices.Equal(got, ids(parked)) {
			t.Fatalf("cycle %d after the refusal: parked %v, want %v", cycle, got, ids(parked))
		}
		if got := w.kept(rebalance.ReasonStartsHeld); got != 2 {
			t.Fatalf("cycle %d after the refusal: %v members counted as kept for the held starts", cycle, got)
		}
	}
	if n := w.cloud.Calls()[sim.OpTerminateInstances]; n != 0 {
		t.Fatalf("%d terminate calls while nothing could replace the parked members", n)
	}
	if n := len(logs.Lines("level=INFO", "pool plan", "kept=starts-held×2")); n != 4 {
		t.Fatalf("%d plan lines saying why the parked members are kept, want 4:\n%s", n, logs)
	}

	w.converge(10)
	if n := w.readyHot(); n != 2 || len(w.rows(domain.StateStopped)) != 0 {
		t.Fatalf("%d ready hot, %d parked; want the created members ready and the parked gone", n, len(w.rows(domain.StateStopped)))
	}
	if got := w.actions("terminate", "excess", "ok"); got != 2 {
		t.Fatalf("%v parked members terminated as excess, want 2", got)
	}
	if got := w.kept(rebalance.ReasonStartsHeld); got != 0 {
		t.Fatalf("%v members still counted as kept", got)
	}
}

// A pool whose image does not resolve cannot tell which members are
// current: none is converted, and none the conversion would take is
// terminated meanwhile.
func TestUnresolvedImageConvertsNothing(t *testing.T) {
	w := newWorld(t, domain.Target{Stopped: 2}, sim.Options{Latency: latency, Images: map[string]string{"ubuntu24": "ami-1"}}, Options{})
	w.converge(10)
	w.edit(func(ps *PoolSpec) { ps.Runner.Image = "ubuntu24-typo" })
	w.setTarget(domain.Target{Hot: 2})
	if got := Describe(w.cycle().Plan); got != "" {
		t.Fatalf("plan %q", got)
	}
	if n := len(w.rows(domain.StateStopped)); n != 2 {
		t.Fatalf("%d parked members left, want 2", n)
	}
}

// A look-up of the image that fails once, at the cycle the schedule swaps
// stopped capacity for hot, does not cost the parked members: they are
// kept that cycle and started at the next.
func TestALookupFailingAtAFlipKeepsTheParkedMembers(t *testing.T) {
	w, parked := parkedPair(t)
	logs := w.logs()
	w.cloud.FailNext(sim.OpDescribeImages, 1, domain.ErrThrottled)
	w.setTarget(domain.Target{Hot: 2})
	r := w.cycle()
	if got := Describe(r.Plan); got != "" || !errors.Is(r.Err, domain.ErrThrottled) {
		t.Fatalf("plan %q, error %v", got, r.Err)
	}
	if got := ids(w.rows(domain.StateStopped)); !slices.Equal(got, ids(parked)) {
		t.Fatalf("parked %v, want %v", got, ids(parked))
	}
	if got := w.kept(rebalance.ReasonConvertsHeld); got != 2 {
		t.Fatalf("%v members counted as kept while the image did not resolve", got)
	}
	if n := len(logs.Lines("level=DEBUG", "pool plan", "kept=converts-held×2")); n != 1 {
		t.Fatalf("%d lines saying why the parked members are kept:\n%s", n, logs)
	}
	w.Clock.Pass(30 * time.Second)
	if got := Describe(w.cycle().Plan); got != "start/convert×2" {
		t.Fatalf("plan once the image resolves %q", got)
	}
	w.converge(5)
	if got := ids(w.rows(domain.StateReady)); !slices.Equal(got, ids(parked)) || w.readyHot() != 2 {
		t.Fatalf("ready hot %v, want the parked members %v", got, ids(parked))
	}
	w.wantCalls(map[string]int{sim.OpCreateFleet: 0, sim.OpTerminateInstances: 0})
	if got := w.kept(rebalance.ReasonConvertsHeld); got != 0 {
		t.Fatalf("%v members still counted as kept", got)
	}
}

// A pool no longer configured loses its series of kept members.
func TestKeptMembersOfARemovedPoolAreNoLongerCounted(t *testing.T) {
	w, _ := parkedPair(t)
	w.cloud.FailNext(sim.OpDescribeImages, 1, domain.ErrThrottled)
	w.setTarget(domain.Target{Hot: 2})
	w.cycle()
	if got := w.kept(rebalance.ReasonConvertsHeld); got != 2 {
		t.Fatalf("%v members counted as kept", got)
	}
	w.mu.Lock()
	w.removed = true
	w.mu.Unlock()
	if _, err := w.conv.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(w.conv.metrics.kept.vec); n != 0 {
		t.Fatalf("%d series of kept members left for a removed pool", n)
	}
}
