// Package converger runs the pool convergence loop: every interval it
// matches each pool's schedule, computes a rebalance plan from a snapshot of
// the store and the cloud, and applies it.
//
// A pool that cannot launch what it misses still does the rest of its plan:
// while its image does not resolve it creates, rolls and converts nothing,
// and while its new members keep failing before they warm its creates back
// off (see createBackoff); either way it still sheds, parks, settles and
// forgets, and its status says why it does not grow. What a conversion
// held back (an image not resolving, starts refused for capacity) would
// have taken is kept meanwhile rather than shed as excess; the plan's log
// line and the bullpen_pool_kept_instances gauge say why.
package converger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launch"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/rebalance"
	"github.com/bullpen-ci/bullpen/internal/schedule"
)

// PoolSpec is a pool with its runner, as the configuration gives them.
type PoolSpec struct {
	Pool   domain.Pool
	Runner domain.RunnerSpec
}

// Targeter says what a pool should hold at an instant and which schedule
// entry says so. The default is the pool's schedule; the autoscaler wraps it.
// ctx is the converger cycle's: what the Targeter reads (the autoscaler's
// demand) ends with the cycle, a lease lost included.
type Targeter func(ctx context.Context, p domain.Pool, at time.Time) (entry string, t domain.Target)

// ScheduleTarget is the Targeter of the warm-pool design: the pool's schedule alone.
func ScheduleTarget(_ context.Context, p domain.Pool, at time.Time) (string, domain.Target) {
	r := schedule.Resolve(p, at)
	return r.Entry, r.Target
}

// Options tune the loop; zero values take the documented defaults.
type Options struct {
	Interval     time.Duration // between cycles; default 30 s
	ControllerID string        // tags every machine; required
	// SpotAllowed, when set, says whether a runner class may launch spot
	// machines now (the spot circuit breaker).
	SpotAllowed   func(runner string) bool
	Deadlines     domain.Deadlines // per-state allowances; default domain.DefaultDeadlines()
	DanglingAfter time.Duration    // default 10 min
	GoneGrace     time.Duration    // default rebalance.DefaultGoneGrace
	CreateBatch   int              // most machines per create call; default 100
	Parallelism   int              // pools converged at once; default 8
	// LeaseTTL > 0 makes each cycle take the "converger" lease first, so
	// only one replica converges at a time. Default 3 × Interval; < 0 off.
	LeaseTTL time.Duration
	Holder   string // lease holder name; default ControllerID
	Targeter Targeter
	// AgentURL is where new machines' agents reach the control plane.
	AgentURL string
	// IDs draws new instances' ids (launch.Launcher.IDs).
	IDs func(prefix string) string
}

// DefaultInterval is the time between cycles when Options.Interval is
// not set.
const DefaultInterval = 30 * time.Second

func (o *Options) defaults() {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Deadlines == (domain.Deadlines{}) {
		o.Deadlines = domain.DefaultDeadlines()
	}
	if o.DanglingAfter <= 0 {
		o.DanglingAfter = rebalance.DefaultDanglingAfter
	}
	if o.GoneGrace <= 0 {
		o.GoneGrace = rebalance.DefaultGoneGrace
	}
	if o.CreateBatch <= 0 {
		o.CreateBatch = 100
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 8
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 3 * o.Interval
	}
	if o.Holder == "" {
		o.Holder = o.ControllerID
	}
	if o.Targeter == nil {
		o.Targeter = ScheduleTarget
	}
}

// Converger keeps pools at their targets.
type Converger struct {
	store   Store
	cloud   domain.Cloud
	clock   domain.Clock
	log     *slog.Logger
	pools   func() []PoolSpec
	opts    Options
	metrics *metrics
	verbs   domain.Lifecycle
	launch  *launch.Launcher
	// unknownImages is, by pool, the image name the cloud last said it does
	// not know, so that the ERROR is logged when that starts, not every cycle.
	unknownImages struct {
		sync.Mutex
		byPool map[string]string
	}
	warmups *warmups
	starts  startRefusals
}

// New returns a converger over the pools that pools returns at each cycle
// (so a configuration reload takes effect on the next cycle).
func New(store Store, cloud domain.Cloud, clk domain.Clock, pools func() []PoolSpec,
	log *slog.Logger, reg prometheus.Registerer, opts Options) (*Converger, error) {
	if opts.ControllerID == "" {
		return nil, errors.New("converger: a controller id is required to tag machines")
	}
	opts.defaults()
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	verbs := domain.NewLifecycle(opts.Deadlines)
	c := &Converger{store: store, cloud: cloud, clock: clk, log: log, pools: pools, opts: opts, metrics: m, verbs: verbs,
		launch: &launch.Launcher{Store: store, Cloud: cloud, Clock: clk, Verbs: verbs,
			ControllerID: opts.ControllerID, AgentURL: opts.AgentURL, SpotAllowed: opts.SpotAllowed, IDs: opts.IDs}}
	c.unknownImages.byPool = map[string]string{}
	c.warmups = newWarmups()
	c.starts.at = map[string]time.Time{}
	return c, nil
}

// PoolReport is what one cycle saw and did for one pool.
type PoolReport struct {
	Pool     string
	Schedule string
	Target   domain.Target
	SpecHash string
	Counts   rebalance.Counts // before the plan was applied
	Plan     rebalance.Plan
	// Err joins what kept the pool from its target this cycle: its image
	// not resolving, its creates backed off (ErrWarmUpsFailing), a step
	// of the plan that failed. The pool status shows it as LastError.
	Err error
}

// Report is the outcome of one cycle, pools in name order.
type Report struct {
	At      time.Time
	Skipped bool // another replica holds the lease
	Pools   []PoolReport
	// CloudErr is set when no cloud call of the cycle went through and
	// some failed for want of the cloud (credentials refused, an outage,
	// throttling): the loop counts such a cycle as failed, so that /healthz
	// shows it. A capacity shortage, an image the cloud does not know and
	// machines gone already are the cloud's answers, not failures.
	CloudErr error
}

// Interval is the time between two cycles.
func (c *Converger) Interval() time.Duration { return c.opts.Interval }

// Loop converges every interval; reports (if non-nil) receives the report
// of each cycle that ran and must be drained. A cycle that could not act on
// the cloud at all (Report.CloudErr) is a failed step, after its report.
func (c *Converger) Loop(reports chan<- Report) loop.Loop {
	return loop.Loop{Name: "converger", Every: c.opts.Interval, MinRetry: c.opts.Interval, Step: func(ctx context.Context) error {
		r, err := c.Cycle(ctx)
		if err != nil {
			return err
		}
		if reports != nil {
			select {
			case reports <- r:
			case <-ctx.Done():
			}
		}
		return r.CloudErr
	}}
}

// Cycle runs one convergence pass over every pool.
func (c *Converger) Cycle(ctx context.Context) (Report, error) {
	now := c.clock.Now()
	rep := Report{At: now}
	if c.opts.LeaseTTL > 0 {
		lease, ok, err := c.store.AcquireLease(ctx, "converger", c.opts.Holder, c.opts.LeaseTTL)
		if err != nil {
			return rep, fmt.Errorf("acquire converger lease: %w", err)
		}
		if !ok {
			c.log.Debug("converger lease held elsewhere", "holder", lease.Holder, "until", lease.Expires)
			rep.Skipped = true
			return rep, nil
		}
	}
	started := time.Now()
	defer func() { c.metrics.cycleSeconds.Observe(time.Since(started).Seconds()) }()
	c.metrics.cycles.Inc()
	c.warmups.resume(now, warmupsStaleAfter*c.opts.Interval)

	specs := c.pools()
	rows, err := c.store.ListInstances(ctx, domain.InstanceFilter{States: liveStates})
	if err != nil {
		return rep, fmt.Errorf("list instances: %w", err)
	}
	byPool := map[string][]domain.Instance{}
	for _, in := range rows {
		if in.Pool != "" {
			byPool[in.Pool] = append(byPool[in.Pool], in)
		}
	}
	view, listErr := c.cloudView(ctx)
	if listErr != nil {
		c.log.Warn("cloud listing failed; converging without it", "err", listErr)
	}
	var names []string
	var calls []cloudCalls
	rep.Pools, names, calls = c.convergeAll(ctx, now, specs, byPool, view)
	sort.Slice(rep.Pools, func(a, b int) bool { return rep.Pools[a].Pool < rep.Pools[b].Pool })
	if ctx.Err() == nil {
		rep.CloudErr = blindness(listErr, names, calls)
	}
	return rep, nil
}

// convergeAll converges the configured pools and drains removed ones, at
// most Parallelism at a time. Besides the configured pools' reports, it
// returns how each pool's cloud calls went, removed ones included, with
// their names, in the same order.
func (c *Converger) convergeAll(ctx context.Context, now time.Time, specs []PoolSpec,
	byPool map[string][]domain.Instance, view map[string]domain.CloudInstance) ([]PoolReport, []string, []cloudCalls) {
	images := newImageCache(c.cloud, c.metrics.cloudErrors.WithLabelValues("DescribeImages"))
	reports := make([]PoolReport, len(specs))
	configured := make(map[string]bool, len(specs))
	for _, ps := range specs {
		configured[ps.Pool.Name] = true
	}
	c.forgetUnknownImages(configured)
	c.metrics.kept.forget(configured)
	c.warmups.forget(configured)
	c.starts.forget(configured)
	var removed []string
	for name := range byPool {
		if !configured[name] {
			removed = append(removed, name)
		}
	}
	slices.Sort(removed)
	names := make([]string, 0, len(specs)+len(removed))
	for _, ps := range specs {
		names = append(names, ps.Pool.Name)
	}
	names = append(names, removed...)
	calls := make([]cloudCalls, len(names))
	clock.Fan(c.clock, len(names), c.opts.Parallelism, func(i int) {
		if i < len(specs) {
			ps := specs[i]
			reports[i] = c.convergePool(ctx, now, ps, byPool[ps.Pool.Name], view, images, &calls[i])
			return
		}
		name := names[i]
		c.drainRemoved(ctx, now, name, byPool[name], view, &calls[i])
	})
	return reports, names, calls
}

// liveStates are all but terminated.
var liveStates = func() []domain.State {
	var s []domain.State
	for _, st := range domain.States {
		if st != domain.StateTerminated {
			s = append(s, st)
		}
	}
	return s
}()

func (c *Converger) cloudView(ctx context.Context) (map[string]domain.CloudInstance, error) {
	machines, err := c.cloud.List(ctx, domain.CloudFilter{Tags: map[string]string{domain.TagController: c.opts.ControllerID}})
	if err != nil {
		c.metrics.cloudErrors.WithLabelValues("DescribeInstances").Inc()
		return nil, err
	}
	view := make(map[string]domain.CloudInstance, len(machines))
	for _, m := range machines {
		view[m.ID] = m
	}
	return view, nil
}

// convergePool plans and applies one pool's changes. Creates are left out
// of the plan while the pool's image does not resolve (there is nothing to
// launch) and while its new members keep failing before they warm (see
// createBackoff); everything else is still done, so that a pool in either
// state still sheds what its target no longer wants, parks and settles its
// members and forgets machines the cloud lost. The image error and the
// failures are reported in the pool's status meanwhile.
func (c *Converger) convergePool(ctx context.Context, now time.Time, ps PoolSpec, rows []domain.Instance,
	view map[string]domain.CloudInstance, images *imageCache, calls *cloudCalls) PoolReport {
	p := ps.Pool
	entry, target := c.opts.Targeter(ctx, p, now)
	r := PoolReport{Pool: p.Name, Schedule: entry, Target: target, Counts: rebalance.Count(rows)}
	imageID, imageErr := images.resolve(ctx, ps.Runner)
	calls.noteRead(imageErr)
	c.noteImage(p.Name, ps.Runner.Image, imageErr)
	if imageErr != nil {
		imageErr = fmt.Errorf("pool %s: resolve image %q: %w", p.Name, ps.Runner.Image, imageErr)
	} else {
		r.SpecHash = domain.SpecHash(ps.Runner, imageID, p)
	}
	warm := c.warmups.observe(p.Name, r.SpecHash, rows, now)
	c.noteWarmups(p.Name, warm, now)
	snap := rebalance.Snapshot{
		Pool: p.Name, Now: now, Target: target, SpecHash: r.SpecHash,
		HotIdleLifetime: p.HotIdleLifetime, DanglingAfter: c.opts.DanglingAfter, GoneGrace: c.opts.GoneGrace,
		Instances: rows, Cloud: view, NoStart: c.starts.held(p.Name, now),
	}
	if imageErr != nil {
		r.Plan = planWithoutSpec(snap)
	} else {
		r.Plan = rebalance.Compute(snap)
	}
	if imageErr != nil || warm.after.holds(now) {
		r.Plan = withoutCreates(r.Plan)
	}
	c.metrics.kept.set(p.Name, r.Plan.Kept)
	attrs := []any{"pool", p.Name, "schedule", entry, "hot", target.Hot, "stopped", target.Stopped, "plan", Describe(r.Plan)}
	if len(r.Plan.Kept) > 0 {
		attrs = append(attrs, "kept", DescribeKept(r.Plan.Kept))
	}
	var applyErr error
	if !r.Plan.Empty() {
		c.log.Info("pool plan", attrs...)
		a := applier{c: c, now: now, spec: ps, imageID: imageID, hash: r.SpecHash, calls: calls}
		applyErr = a.apply(ctx, r.Plan)
	} else if len(r.Plan.Kept) > 0 {
		// Quieter while nothing is done, as a pool held for long would
		// say the same every cycle: the kept gauge shows it meanwhile.
		c.log.Debug("pool plan", attrs...)
	}
	if applyErr != nil {
		c.log.Warn("pool converged with errors", "pool", p.Name, "err", applyErr)
	}
	r.Err = errors.Join(imageErr, warm.after.err(p.Name, now), applyErr)
	c.recordStatus(ctx, r, now)
	return r
}

// startHold is how long a pool's parked members are not started to become
// hot once the cloud refused to start its machines for want of capacity:
// meanwhile the hot members it misses are created, as another instance
// type or in another zone if need be, rather than waiting for the shortage
// to end.
const startHold = 10 * time.Minute

// startRefusals remembers, by pool, when the cloud last refused to start
// the pool's machines for want of capacity. Like the warm-up streaks, it
// lives in the memory of the replica holding the converger's lease.
type startRefusals struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (r *startRefusals) refused(pool string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at[pool] = now
}

// held reports whether pool's starts are held at now.
func (r *startRefusals) held(pool string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[pool]
	if ok && !now.Before(at.Add(startHold)) {
		delete(r.at, pool)
		return false
	}
	return ok
}

// forget drops the pools not configured.
func (r *startRefusals) forget(configured map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	dropUnconfigured(r.at, configured)
}

// unknownSpec is the spec hash a pool whose image did not resolve is
// planned against: its own and every member's, so that none is outdated.
const unknownSpec = "image-not-resolved"

// planWithoutSpec is the plan of a pool whose spec hash cannot be known
// this cycle, its image not resolving: no member is outdated, for which
// of them are cannot be told, and a pool is never rolled on a lookup that
// failed; for the same reason no member changes role. Its steps name the
// rows as read.
func planWithoutSpec(snap rebalance.Snapshot) rebalance.Plan {
	asRead := make(map[string]domain.Instance, len(snap.Instances))
	same := make([]domain.Instance, len(snap.Instances))
	for i, in := range snap.Instances {
		asRead[in.ID] = in
		in.SpecHash = unknownSpec
		same[i] = in
	}
	snap.SpecHash, snap.Instances, snap.NoConvert = unknownSpec, same, true
	plan := rebalance.Compute(snap)
	readBack := func(insts []domain.Instance) []domain.Instance {
		if insts == nil {
			return nil
		}
		out := make([]domain.Instance, len(insts))
		for j, in := range insts {
			out[j] = asRead[in.ID]
		}
		return out
	}
	for i, st := range plan.Steps {
		plan.Steps[i].Instances = readBack(st.Instances)
	}
	for i, k := range plan.Kept {
		plan.Kept[i].Instances = readBack(k.Instances)
	}
	return plan
}

// withoutCreates is p less its create steps.
func withoutCreates(p rebalance.Plan) rebalance.Plan {
	p.Steps = slices.DeleteFunc(slices.Clone(p.Steps), func(st rebalance.Step) bool { return st.Action == rebalance.Create })
	return p
}

// drainRemoved retires the members of a pool that is no longer configured:
// with a zero target and a spec hash no instance carries, every idle member
// is planned for termination, and machines the cloud lost are forgotten.
// Instances bound to a job are left to finish it; released, they are idle
// members again, and a later cycle terminates them.
func (c *Converger) drainRemoved(ctx context.Context, now time.Time, name string, rows []domain.Instance,
	view map[string]domain.CloudInstance, calls *cloudCalls) {
	plan := rebalance.Compute(rebalance.Snapshot{
		Pool: name, Now: now, SpecHash: removedPoolHash,
		DanglingAfter: c.opts.DanglingAfter, GoneGrace: c.opts.GoneGrace,
		Instances: rows, Cloud: view,
	})
	if plan.Empty() {
		return
	}
	c.log.Info("pool removed from configuration; draining", "pool", name, "plan", Describe(plan))
	a := applier{c: c, now: now, spec: PoolSpec{Pool: domain.Pool{Name: name}}, calls: calls}
	if err := a.apply(ctx, plan); err != nil && ctx.Err() == nil {
		c.log.Warn("draining a removed pool failed; next cycle retries", "pool", name, "err", err)
	}
}

// removedPoolHash is the spec hash a removed pool is planned against; it
// is not a hash, so every member counts as outdated.
const removedPoolHash = "removed-from-configuration"

// noteImage logs how a pool's image resolved. An image the cloud does not
// know needs a human (a typo, an image not published or deregistered): that
// is an ERROR when it starts, and quieter while it lasts, for the pool
// status and the cloud-error counter show it meanwhile. Any other failure
// (throttling, a network error) is retried next cycle: a WARN.
func (c *Converger) noteImage(pool, image string, err error) {
	c.unknownImages.Lock()
	was, known := c.unknownImages.byPool[pool]
	unknown := errors.Is(err, domain.ErrUnknownImage)
	switch {
	case unknown:
		c.unknownImages.byPool[pool] = image
	case err == nil:
		delete(c.unknownImages.byPool, pool)
	}
	c.unknownImages.Unlock()
	switch {
	case unknown && (!known || was != image):
		c.log.Error("pool can neither grow nor roll: the cloud knows no such image", "pool", pool, "image", image, "err", err)
	case unknown:
		c.log.Debug("pool still cannot grow: unknown image", "pool", pool, "image", image)
	case err != nil:
		c.log.Warn("pool creates nothing this cycle: its image did not resolve; the next cycle retries",
			"pool", pool, "image", image, "err", err)
	case known:
		c.log.Info("pool's image resolves again", "pool", pool, "image", image)
	}
}

// noteWarmups logs and counts what a cycle changed in a pool's streak of
// members that failed before warming, once per change: a WARN while the
// creates back off, an ERROR when the backoff reaches its cap (six new
// members in a row failed and none warmed: the image or the warm-up needs
// a human), and an INFO when the streak ends.
func (c *Converger) noteWarmups(pool string, ch warmupChange, now time.Time) {
	if ch.failed > 0 {
		c.metrics.warmUpFailures.WithLabelValues(pool).Add(float64(ch.failed))
	}
	s := ch.after
	switch {
	case ch.grew() && s.capped() && !ch.before.capped():
		c.log.Error("every new instance of the pool fails before it warms: check its image and warm-up command "+
			"(the failed machines' agent logs say why); creates are backed off to one round every "+maxCreateBackoff.String(),
			"pool", pool, "failures_in_a_row", s.failures, "last_reason", s.reason, "creates_held_until", s.until)
	case ch.grew():
		c.log.Warn("new instances of the pool failed before they warmed; its creates back off",
			"pool", pool, "failures_in_a_row", s.failures, "last_reason", s.reason, "retry_in", s.until.Sub(now))
	case ch.before.failures > 0 && s.failures == 0 && ch.warmed:
		c.log.Info("an instance of the pool warmed; its creates are no longer held", "pool", pool,
			"failures_before", ch.before.failures)
	case ch.before.failures > 0 && s.failures == 0:
		c.log.Info("the pool's spec changed; its creates are no longer held for the old spec's failed warm-ups", "pool", pool,
			"failures_before", ch.before.failures)
	}
}

// forgetUnknownImages drops what noteImage remembers of pools no longer
// configured, so that one configured again is reported afresh.
func (c *Converger) forgetUnknownImages(configured map[string]bool) {
	c.unknownImages.Lock()
	defer c.unknownImages.Unlock()
	dropUnconfigured(c.unknownImages.byPool, configured)
}

// dropUnconfigured deletes from byPool the pools not configured: what a
// converger remembers of a pool ends with the pool.
func dropUnconfigured[V any](byPool map[string]V, configured map[string]bool) {
	for pool := range byPool {
		if !configured[pool] {
			delete(byPool, pool)
		}
	}
}

// recordStatus writes what the cycle saw of the pool to the store, which
// every replica reads: the dashboard shows it, and exports its target as
// the gauge the alert rules compare the pool's ready instances with.
func (c *Converger) recordStatus(ctx context.Context, r PoolReport, now time.Time) {
	st := domain.PoolStatus{
		Name: r.Pool, Schedule: r.Schedule, Target: r.Target, SpecHash: r.SpecHash, LastCycle: now,
		Counts: map[string]int{
			"ready_hot": r.Counts.ReadyHot, "stopped": r.Counts.Stopped, "warming": r.Counts.Warming,
			"detached": r.Counts.Detached, "other": r.Counts.Other,
		},
	}
	if r.Err != nil {
		st.LastError = r.Err.Error()
	}
	if err := c.store.PutPoolStatus(ctx, st); err != nil && ctx.Err() == nil {
		c.log.Warn("record pool status", "pool", r.Pool, "err", err)
	}
}

// Describe renders a plan for a log line: "terminate/outdated×3 create/hot×2".
func Describe(p rebalance.Plan) string {
	var s string
	for i, st := range p.Steps {
		if i > 0 {
			s += " "
		}
		n := st.Count
		if st.Action != rebalance.Create {
			n = len(st.Instances)
		}
		label := string(st.Reason)
		if st.Action == rebalance.Create {
			label = string(st.Role)
		}
		s += fmt.Sprintf("%s/%s×%d", st.Action, label, n)
	}
	return s
}

// DescribeKept renders what a plan keeps for a log line: "starts-held×2".
func DescribeKept(kept []rebalance.Kept) string {
	var s string
	for i, k := range kept {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s×%d", k.Reason, len(k.Instances))
	}
	return s
}

// imageCache resolves each image name once per cycle, counting the calls
// that fail.
type imageCache struct {
	cloud  domain.Cloud
	failed prometheus.Counter
	mu     sync.Mutex
	ids    map[string]imageResult
}

type imageResult struct {
	id  string
	err error
}

func newImageCache(cloud domain.Cloud, failed prometheus.Counter) *imageCache {
	return &imageCache{cloud: cloud, failed: failed, ids: map[string]imageResult{}}
}

// resolve resolves runner r's image; one name may give runners of
// different architectures different images, so the answer is kept by
// runner and name.
func (ic *imageCache) resolve(ctx context.Context, r domain.RunnerSpec) (string, error) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	key := r.Name + "\x00" + r.Image
	if res, ok := ic.ids[key]; ok {
		return res.id, res.err
	}
	id, err := ic.cloud.ResolveImage(ctx, r.Image, r)
	if err != nil && ctx.Err() == nil {
		ic.failed.Inc()
	}
	ic.ids[key] = imageResult{id, err}
	return id, err
}
