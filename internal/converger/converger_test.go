package converger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/loop/looptest"
	"github.com/bullpen-ci/bullpen/internal/reaper"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

var start = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

var latency = sim.Latency{Boot: 15 * time.Second, WarmUp: 30 * time.Second, Stop: 10 * time.Second, Start: 10 * time.Second, Terminate: 5 * time.Second}

// world is a converger on the test world and the simulated cloud, with
// one pool whose target and runner a test can change.
type world struct {
	*testworld.World
	cloud *sim.Cloud
	conv  *Converger
	reg   *prometheus.Registry

	mu      sync.Mutex
	spec    PoolSpec
	removed bool // the pool is no longer configured
}

func newWorld(t testing.TB, target domain.Target, simOpts sim.Options, opts Options) *world {
	t.Helper()
	return newWorldSignals(t, target, simOpts, opts, nil)
}

// newWorldSignals is newWorld whose machines' signals reach the agents
// service through the sink wrap makes of it, when wrap is set.
func newWorldSignals(t testing.TB, target domain.Target, simOpts sim.Options, opts Options,
	wrap func(domain.SignalSink) domain.SignalSink) *world {
	t.Helper()
	w := &world{World: testworld.New(t, start), reg: prometheus.NewRegistry()}
	w.spec = PoolSpec{
		Pool: domain.Pool{Name: "p", Runner: "small", HotIdleLifetime: 10 * time.Minute,
			Schedule: []domain.ScheduleEntry{{Name: "default", Hot: target.Hot, Stopped: target.Stopped}}},
		Runner: domain.RunnerSpec{Name: "small", Image: "ubuntu24", CPU: domain.Range{Min: 2, Max: 2}, RAM: domain.Range{Min: 4, Max: 4}},
	}
	warm, err := agents.New(w.Store, w.Queue, w.Clock, w.Log, nil, agents.Options{
		Policy: func(domain.Instance) agents.Policy { return agents.Policy{IdleLifetime: 10 * time.Minute} },
	})
	if err != nil {
		t.Fatal(err)
	}
	simOpts.Signals = warm
	if wrap != nil {
		simOpts.Signals = wrap(warm)
	}
	w.cloud = w.NewCloud(simOpts)
	opts.ControllerID = "test"
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = -1
	}
	w.conv, err = New(w.Store, w.cloud, w.Clock, w.pools, w.Log, w.reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) pools() []PoolSpec {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.removed {
		return nil
	}
	return []PoolSpec{w.spec}
}

func (w *world) edit(fn func(*PoolSpec)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fn(&w.spec)
}

func (w *world) setTarget(t domain.Target) {
	w.edit(func(ps *PoolSpec) { ps.Pool.Schedule[0].Hot, ps.Pool.Schedule[0].Stopped = t.Hot, t.Stopped })
}

// cycle runs one convergence pass and returns the pool's report.
func (w *world) cycle() PoolReport {
	w.T.Helper()
	rep, err := w.conv.Cycle(context.Background())
	if err != nil {
		w.T.Fatal(err)
	}
	if len(rep.Pools) != 1 {
		w.T.Fatalf("report has %d pools", len(rep.Pools))
	}
	return rep.Pools[0]
}

// converge runs cycles 30 s apart until the pool is at target with nothing
// left to do, failing after n cycles.
func (w *world) converge(n int) PoolReport {
	w.T.Helper()
	var r PoolReport
	for range n {
		r = w.cycle()
		c := r.Counts
		if r.Plan.Empty() && c.ReadyHot == r.Target.Hot && c.Stopped == r.Target.Stopped && c.Warming == 0 && c.Other == 0 {
			return r
		}
		w.Clock.Pass(30 * time.Second)
	}
	w.T.Fatalf("pool not at target after %d cycles: %+v, last plan %s", n, r.Counts, Describe(r.Plan))
	return r
}

// cycleUntilPlanned runs cycles 30 s apart until one plans something, at
// most n, and returns the last report.
func (w *world) cycleUntilPlanned(n int) PoolReport {
	w.T.Helper()
	var r PoolReport
	for range n {
		w.Clock.Pass(30 * time.Second)
		if r = w.cycle(); !r.Plan.Empty() {
			break
		}
	}
	return r
}

// wantCalls fails the test unless the cloud took each operation in want
// as many times as want says; other operations are not looked at.
func (w *world) wantCalls(want map[string]int) {
	w.T.Helper()
	calls := w.cloud.Calls()
	for op, n := range want {
		if calls[op] != n {
			w.T.Fatalf("calls %v, want %v", calls, want)
		}
	}
}

// actions is how many instances of pool p the converger counted as acted
// on for action and reason, with result.
func (w *world) actions(action, reason, result string) float64 {
	return testutil.ToFloat64(w.conv.metrics.actions.WithLabelValues("p", action, reason, result))
}

func (w *world) rows(states ...domain.State) []domain.Instance {
	w.T.Helper()
	rows, err := w.Store.ListInstances(context.Background(), domain.InstanceFilter{Pool: "p", States: states})
	if err != nil {
		w.T.Fatal(err)
	}
	return rows
}

func TestConvergerFillsThenParksAPool(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 1, Stopped: 2}, sim.Options{Latency: latency}, Options{})
	r := w.cycle()
	if got := Describe(r.Plan); got != "create/hot×1 create/stopped×2" {
		t.Fatalf("first plan %q", got)
	}
	if n := len(w.rows(domain.StateBooting)); n != 3 {
		t.Fatalf("%d booting after the first cycle", n)
	}
	w.Clock.Pass(30 * time.Second) // boot 15 s, warm-up due at 45 s
	if r := w.cycle(); !r.Plan.Empty() || r.Counts.Warming != 3 {
		t.Fatalf("at 30 s: plan %s, counts %+v", Describe(r.Plan), r.Counts)
	}
	w.Clock.Pass(30 * time.Second)
	if got := Describe(w.cycle().Plan); got != "stop/warm×2" {
		t.Fatalf("at 60 s plan %q", got)
	}
	w.Clock.Pass(30 * time.Second)
	if got := Describe(w.cycle().Plan); got != "settle/stopped×2" {
		t.Fatalf("at 90 s plan %q", got)
	}
	final := w.converge(2)
	if final.Counts.ReadyHot != 1 || final.Counts.Stopped != 2 {
		t.Fatalf("final counts %+v", final.Counts)
	}
	w.wantCalls(map[string]int{sim.OpCreateFleet: 2, sim.OpStopInstances: 1})
	if got := w.actions("create", "missing", "ok"); got != 3 {
		t.Fatalf("create actions counted %v", got)
	}
}

func TestRollTerminatesOutdatedBeforeCreatingInBatchesOf50(t *testing.T) {
	w := newWorld(t, domain.Target{Stopped: 120}, sim.Options{}, Options{})
	w.converge(5)
	old := w.rows(domain.StateStopped)
	w.cloud.ResetCalls()
	// A size a type exists for: 4 vCPUs and 8 GiB (a c7a.xlarge, say).
	w.edit(func(ps *PoolSpec) {
		ps.Runner.CPU, ps.Runner.RAM = domain.Range{Min: 4, Max: 4}, domain.Range{Min: 8, Max: 8}
	})

	r := w.cycle()
	if got := Describe(r.Plan); got != "terminate/outdated×120 create/stopped×120" {
		t.Fatalf("roll plan %q", got)
	}
	calls, most := w.cloud.Calls(), w.cloud.MaxIDsPerCall()
	if calls[sim.OpTerminateInstances] != 3 || most[sim.OpTerminateInstances] > domain.MaxBatch {
		t.Fatalf("terminations: %d calls, at most %d ids", calls[sim.OpTerminateInstances], most[sim.OpTerminateInstances])
	}
	if calls[sim.OpCreateFleet] != 2 { // CreateBatch 100: 100 + 20
		t.Fatalf("CreateFleet calls %d", calls[sim.OpCreateFleet])
	}
	for _, in := range old {
		got, err := w.Store.GetInstance(context.Background(), in.ID)
		if err != nil || got.State != domain.StateTerminated || got.Reason != "outdated" {
			t.Fatalf("old instance %s: %+v %v", in.ID, got, err)
		}
		if m, _ := w.cloud.Get(in.CloudID); m.State != domain.CloudShuttingDown && m.State != domain.CloudTerminated {
			t.Fatalf("old machine %s is %s", in.CloudID, m.State)
		}
	}
	w.converge(5)
}

// raceStore claims an instance for a job just before the converger's first
// batch of changes lands: the job must win.
type raceStore struct {
	domain.Store
	once   sync.Once
	victim string
	err    error
}

func (s *raceStore) TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error) {
	s.once.Do(func() {
		_, s.err = s.Store.Transition(ctx, s.victim, domain.Guard{State: domain.StateReady}, func(i *domain.Instance) {
			i.State, i.Job = domain.StateClaimed, "job-1"
		})
	})
	return s.Store.TransitionBatch(ctx, reqs)
}

func TestInstanceClaimedMidCycleIsNeverTerminated(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 2}, sim.Options{}, Options{})
	w.converge(5)
	hot := w.rows(domain.StateReady)
	rs := &raceStore{Store: w.Store, victim: hot[0].ID}
	w.conv.store = rs
	w.setTarget(domain.Target{}) // both are now excess
	r := w.cycle()
	if rs.err != nil {
		t.Fatal(rs.err)
	}
	if got := Describe(r.Plan); got != "terminate/excess×2" {
		t.Fatalf("plan %q", got)
	}
	claimed, _ := w.Store.GetInstance(context.Background(), hot[0].ID)
	if claimed.State != domain.StateClaimed || claimed.Job != "job-1" {
		t.Fatalf("claimed instance became %+v", claimed)
	}
	if m, _ := w.cloud.Get(claimed.CloudID); m.State != domain.CloudRunning {
		t.Fatalf("claimed instance's machine is %s", m.State)
	}
	other, _ := w.Store.GetInstance(context.Background(), hot[1].ID)
	if other.State != domain.StateTerminated {
		t.Fatalf("unclaimed excess instance is %s", other.State)
	}
	if got := testutil.ToFloat64(w.conv.metrics.conflicts); got != 1 {
		t.Fatalf("conflicts counted %v", got)
	}
	if ok, conflict := w.actions("terminate", "excess", "ok"), w.actions("terminate", "excess", "conflict"); ok != 1 || conflict != 1 {
		t.Fatalf("excess terminations counted %v ok, %v conflict; want 1 and 1", ok, conflict)
	}
}

func TestPoolRemovedFromConfigurationIsDrained(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 2, Stopped: 1}, sim.Options{Latency: latency}, Options{})
	w.converge(10)
	hot := w.rows(domain.StateReady)
	busy, err := w.Store.Transition(context.Background(), hot[0].ID, domain.GuardOf(hot[0]), func(i *domain.Instance) {
		i.State, i.Job = domain.StateClaimed, "job-1"
	})
	if err != nil {
		t.Fatal(err)
	}
	w.edit(func(*PoolSpec) { w.removed = true })
	rep, err := w.conv.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Pools) != 0 {
		t.Fatalf("report lists removed pools: %+v", rep.Pools)
	}
	for _, in := range w.rows() {
		want := domain.StateTerminated
		if in.ID == busy.ID {
			want = domain.StateClaimed
		}
		if in.State != want {
			t.Errorf("%s (%s) is %s, want %s", in.ID, in.Role, in.State, want)
		}
	}
	if m, _ := w.cloud.Get(busy.CloudID); m.State != domain.CloudRunning {
		t.Fatalf("the busy instance's machine is %s", m.State)
	}
	if got := w.actions("terminate", "outdated", "ok"); got != 2 {
		t.Fatalf("outdated terminations counted %v, want 2", got)
	}
}

func TestFailedTerminateIsLeftToTheTerminator(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 1}, sim.Options{}, Options{})
	w.converge(5)
	w.setTarget(domain.Target{})
	w.cloud.FailNext(sim.OpTerminateInstances, 1, errors.New("service unavailable"))
	r := w.cycle()
	if r.Err == nil {
		t.Fatal("a failed terminate call must be reported")
	}
	if n := len(w.rows(domain.StateTerminating)); n != 1 {
		t.Fatalf("%d rows terminating after the failed call", n)
	}
	if ok, failed := w.actions("terminate", "excess", "ok"), w.actions("terminate", "excess", "error"); ok != 0 || failed != 1 {
		t.Fatalf("the failed termination counted %v ok, %v error", ok, failed)
	}
	if got := Describe(w.cycle().Plan); got != "" {
		t.Fatalf("the converger must leave terminations under way alone, planned %q", got)
	}
	term := &reaper.Terminator{Store: w.Store, Cloud: w.cloud, Clock: w.Clock, Log: w.Log}
	if n, err := term.Sweep(context.Background()); err != nil || n != 1 {
		t.Fatalf("terminator closed %d rows: %v", n, err)
	}
	if n := len(w.rows(domain.StateTerminated)); n != 1 {
		t.Fatalf("%d rows terminated after the sweep", n)
	}
}

// A machine ended outside bullpen (from the console, say) and no longer
// known to the cloud is terminated already: its row is closed as any
// other, with no error, cloud error or failed action counted for it.
func TestTerminateOfAMachineGoneAlreadyIsDone(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 2}, sim.Options{TerminatedRetention: time.Minute}, Options{})
	w.converge(5)
	hot := w.rows(domain.StateReady)
	if err := w.cloud.Terminate(w.Ctx, []string{hot[0].CloudID}); err != nil {
		t.Fatal(err)
	}
	w.Clock.Pass(2 * time.Minute) // past the retention: the cloud no longer knows it
	if _, ok := w.cloud.Get(hot[0].CloudID); ok {
		t.Fatal("the machine ended outside is still known")
	}
	w.setTarget(domain.Target{})
	// Without a listing the plan cannot tell the machine is gone.
	w.cloud.FailNext(sim.OpDescribeInstances, 1, errors.New("service unavailable"))
	rep, err := w.conv.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Pools[0]
	if got := Describe(r.Plan); got != "terminate/excess×2" {
		t.Fatalf("plan %q", got)
	}
	if r.Err != nil {
		t.Fatalf("pool error %v for a machine gone already", r.Err)
	}
	for _, in := range hot {
		got, _ := w.Store.GetInstance(context.Background(), in.ID)
		if got.State != domain.StateTerminated {
			t.Errorf("%s is %s, want terminated", in.ID, got.State)
		}
	}
	if m, _ := w.cloud.Get(hot[1].CloudID); m.State != domain.CloudShuttingDown && m.State != domain.CloudTerminated {
		t.Fatalf("the other machine is %s", m.State)
	}
	if ok, failed := w.actions("terminate", "excess", "ok"), w.actions("terminate", "excess", "error"); ok != 2 || failed != 0 {
		t.Fatalf("terminations counted %v ok, %v error; want 2 and 0", ok, failed)
	}
	if got := testutil.ToFloat64(w.conv.metrics.cloudErrors.WithLabelValues("TerminateInstances")); got != 0 {
		t.Fatalf("%v terminate calls counted as failed", got)
	}
}

func TestPartialFulfilmentLeavesNoStrayRows(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 3}, sim.Options{Capacity: 2}, Options{})
	r := w.cycle()
	if !errors.Is(r.Err, domain.ErrInsufficientCapacity) {
		t.Fatalf("err = %v", r.Err)
	}
	if n := len(w.rows(domain.StateBooting, domain.StateReady)); n != 2 {
		t.Fatalf("%d instances up, want the 2 that fit", n)
	}
	if n := len(w.rows(domain.StatePending, domain.StateTerminating)); n != 0 {
		t.Fatalf("%d rows left pending or terminating", n)
	}
	if ok, failed := w.actions("create", "missing", "ok"), w.actions("create", "missing", "error"); ok != 2 || failed != 1 {
		t.Fatalf("creates counted %v ok, %v error; want the 2 that fit and the 1 that did not", ok, failed)
	}
	st, err := w.Store.ListPoolStatus(context.Background())
	if err != nil || len(st) != 1 || st[0].LastError == "" {
		t.Fatalf("pool status %+v %v", st, err)
	}
	w.cloud.SetCapacity(0)
	w.Clock.Pass(time.Minute)
	w.converge(3)
}

func TestInstanceThatNeverWarmsIsReplacedAsDangling(t *testing.T) {
	w := newWorld(t, domain.Target{Stopped: 1}, sim.Options{Latency: latency, NeverWarmEvery: 1}, Options{})
	w.cycle()
	stuck := w.rows(domain.StateBooting)[0]
	r := w.cycleUntilPlanned(25)
	if got := Describe(r.Plan); got != "terminate/dangling×1 create/stopped×1" {
		t.Fatalf("plan %q", got)
	}
	if el := w.Clock.Now().Sub(start); el != 10*time.Minute {
		t.Fatalf("replaced after %s, want 10m", el)
	}
	got, _ := w.Store.GetInstance(context.Background(), stuck.ID)
	if got.State != domain.StateTerminated || got.Reason != "dangling" {
		t.Fatalf("stuck instance %+v", got)
	}
}

func TestHotInstanceIsReplacedAfterItsIdleLifetime(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 1}, sim.Options{Latency: latency}, Options{})
	w.converge(5)
	orig := w.rows(domain.StateReady)[0]
	r := w.cycleUntilPlanned(30)
	if got := Describe(r.Plan); got != "create/hot×1" {
		t.Fatalf("plan %q at expiry, want the replacement created first", got)
	}
	if idle := w.Clock.Now().Sub(orig.StateSince); idle < 10*time.Minute || idle >= 10*time.Minute+30*time.Second {
		t.Fatalf("replaced after %s idle", idle)
	}
	// The original serves until its replacement is ready, then goes.
	for range 5 {
		if n := w.readyHot(); n == 0 {
			t.Fatalf("no ready hot instance %s after expiry", w.Clock.Now().Sub(orig.StateSince))
		}
		w.Clock.Pass(30 * time.Second)
		if r = w.cycle(); !r.Plan.Empty() {
			break
		}
	}
	if got := Describe(r.Plan); got != "terminate/idle-lifetime×1" {
		t.Fatalf("plan %q once the replacement is ready", got)
	}
	if r.Counts.ReadyHot != 2 {
		t.Fatalf("retired with %d ready hot instances, want the original and its replacement", r.Counts.ReadyHot)
	}
	if got := r.Plan.Steps[0].Instances[0].ID; got != orig.ID {
		t.Fatalf("retired %s, want the original %s", got, orig.ID)
	}
	if got, _ := w.Store.GetInstance(context.Background(), orig.ID); got.State != domain.StateTerminated || got.Reason != "idle-lifetime" {
		t.Fatalf("original instance %+v", got)
	}
	if n := w.readyHot(); n != 1 {
		t.Fatalf("%d ready hot instances after the retirement, want the replacement", n)
	}
}

// readyHot is how many hot members of the pool are ready now.
func (w *world) readyHot() int {
	w.T.Helper()
	n := 0
	for _, in := range w.rows(domain.StateReady) {
		if in.Role == domain.RoleHot {
			n++
		}
	}
	return n
}

func TestLeaseHeldByAnotherReplicaSkipsTheCycle(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 1}, sim.Options{}, Options{LeaseTTL: time.Minute})
	if _, ok, err := w.Store.AcquireLease(context.Background(), "converger", "replica-2", time.Minute); err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	rep, err := w.conv.Cycle(context.Background())
	if err != nil || !rep.Skipped || len(rep.Pools) != 0 {
		t.Fatalf("report %+v err %v", rep, err)
	}
	w.Clock.Advance(time.Minute)
	if rep, _ := w.conv.Cycle(context.Background()); rep.Skipped {
		t.Fatal("lease expired but the cycle was still skipped")
	}
}

func TestRunStopsWhenContextEnds(t *testing.T) {
	w := newWorld(t, domain.Target{}, sim.Options{}, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan Report)
	done := make(chan error)
	go func() { done <- looptest.Run(ctx, w.Clock, w.conv.Loop(reports)) }()
	<-reports
	w.Clock.BlockUntil(1) // parked until the next interval
	w.Clock.Advance(30 * time.Second)
	<-reports
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCycle measures one converger cycle over 200 pools holding 10,000
// instances at their targets: the steady-state cost of convergence.
func BenchmarkCycle(b *testing.B) {
	const pools, per = 200, 50
	w := newWorld(b, domain.Target{}, sim.Options{}, Options{Parallelism: 8})
	var specs []PoolSpec
	for i := range pools {
		ps := w.spec
		ps.Pool.Name = fmt.Sprintf("pool-%03d", i)
		ps.Pool.Schedule = []domain.ScheduleEntry{{Name: "default", Hot: per / 5, Stopped: per - per/5}}
		specs = append(specs, ps)
	}
	w.conv.pools = func() []PoolSpec { return specs }
	ctx := context.Background()
	for range 4 { // create, warm, stop, settle
		if _, err := w.conv.Cycle(ctx); err != nil {
			b.Fatal(err)
		}
		w.Clock.Pass(30 * time.Second)
	}
	rows, _ := w.Store.ListInstances(ctx, domain.InstanceFilter{States: []domain.State{domain.StateReady, domain.StateStopped}})
	if len(rows) != pools*per {
		b.Fatalf("setup reached %d instances, want %d", len(rows), pools*per)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rep, err := w.conv.Cycle(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range rep.Pools {
			if !p.Plan.Empty() {
				b.Fatalf("pool %s not at steady state: %s", p.Pool, Describe(p.Plan))
			}
		}
	}
}

// A spot runner's parked members launch on-demand: a one-time spot
// instance, as a fleet launches them, cannot be stopped. Its hot members
// stay on spot.
func TestStoppedMembersOfASpotRunnerLaunchOnDemand(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 1, Stopped: 2}, sim.Options{}, Options{})
	w.edit(func(ps *PoolSpec) { ps.Runner.Spot = "price-capacity-optimized" })
	w.cycle()
	machines, err := w.cloud.List(w.Ctx, domain.CloudFilter{})
	if err != nil {
		t.Fatal(err)
	}
	usage := map[string][]string{}
	for _, m := range machines {
		usage[m.Tags[domain.TagRole]] = append(usage[m.Tags[domain.TagRole]], m.UsageClass)
	}
	if !slices.Equal(usage["hot"], []string{"spot"}) || !slices.Equal(usage["stopped"], []string{"on-demand", "on-demand"}) {
		t.Fatalf("usage classes by role %v, want hot on spot and stopped on-demand", usage)
	}
}
