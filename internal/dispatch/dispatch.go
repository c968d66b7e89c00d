// Package dispatch serves the pool queue (seed 000, "Pool Queue
// Processing"): it receives jobs in batches, groups them by pool, claims warm
// instances for all of them at once (running before stopped), detaches them
// with one tag call, starts the stopped ones at most 50 per call, registers
// a just-in-time runner for each job, and overflows the rest to the launch
// queue.
package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// Options tune the dispatcher; zero values take the defaults.
type Options struct {
	// BatchMax is the most jobs taken per cycle. Seed 000 takes 10; that
	// is a floor: under a burst a larger batch costs far fewer cloud calls.
	BatchMax   int           // default 500
	Visibility time.Duration // default 60 s
	Wait       time.Duration // long poll when the queue is empty; default 1 s, negative none
	Deadlines  domain.Deadlines
	// RegisterParallelism bounds concurrent runner registrations.
	RegisterParallelism int // default 16
	// TagBatch is the most ids per tag call; default 1000.
	TagBatch int
	// Linger: see jobs.BatchOptions. Default 20 ms; negative: none.
	Linger time.Duration
}

func (o *Options) defaults() {
	if o.BatchMax <= 0 {
		o.BatchMax = 500
	}
	if o.Visibility <= 0 {
		o.Visibility = time.Minute
	}
	if o.Wait == 0 {
		o.Wait = time.Second
	}
	if o.Deadlines == (domain.Deadlines{}) {
		o.Deadlines = domain.DefaultDeadlines()
	}
	if o.RegisterParallelism <= 0 {
		o.RegisterParallelism = 16
	}
	if o.TagBatch <= 0 {
		o.TagBatch = 1000
	}
	if o.Linger == 0 {
		o.Linger = 20 * time.Millisecond
	}
}

// Deps are the dispatcher's collaborators.
type Deps struct {
	Store  domain.Store
	Queue  domain.Queue
	Cloud  domain.Cloud
	GitHub domain.GitHub
	Clock  domain.Clock
	Log    *slog.Logger
	// Scope says where a job's runner registers.
	Scope func(j domain.Job) domain.Scope
	// SpecHash returns a pool's current spec hash ("" when not yet known),
	// so that outdated instances are not handed out.
	SpecHash func(pool string) string
	// Notify wakes an instance's agent after its assignment.
	Notify func(cloudID string)
}

// Dispatcher serves the pool queue.
type Dispatcher struct {
	Deps
	opts    Options
	metrics *metrics
}

// New returns a dispatcher; reg may be nil.
func New(d Deps, reg prometheus.Registerer, opts Options) (*Dispatcher, error) {
	opts.defaults()
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	if d.Notify == nil {
		d.Notify = func(string) {}
	}
	if d.SpecHash == nil {
		d.SpecHash = func(string) string { return "" }
	}
	return &Dispatcher{Deps: d, opts: opts, metrics: m}, nil
}

// Run serves the queue until ctx ends. A batch already received is carried
// through to the end, so a shutdown leaves nothing half-claimed.
func (d *Dispatcher) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if _, err := d.Step(ctx); err != nil && ctx.Err() == nil {
			d.Log.Warn("pool dispatch failed", "err", err)
			select {
			case <-ctx.Done():
			case <-d.Clock.After(time.Second):
			}
		}
	}
	return nil
}

// Result counts what one step did.
type Result struct {
	Received, Assigned, Overflowed, Skipped, Retried int
}

// item is one received job on its way through a step.
type item struct {
	msg  domain.Message
	job  domain.Job
	inst domain.Instance // claimed for the job
	// wasStopped: the instance must be started; startFailed: that failed,
	// so it never left stopped.
	wasStopped, startFailed bool
	reg                     domain.RunnerRegistration
	err                     error // why this item failed and goes back to the queue
}

// Step receives one batch and serves it.
func (d *Dispatcher) Step(ctx context.Context) (Result, error) {
	msgs, err := jobs.ReceiveBatch(ctx, d.Queue, d.Clock, domain.QueuePool, jobs.BatchOptions{
		Max: d.opts.BatchMax, Visibility: d.opts.Visibility, Wait: d.opts.Wait, Linger: d.opts.Linger})
	if err != nil || len(msgs) == 0 {
		return Result{}, err
	}
	// From here the batch is ours: finish it even if ctx is cancelled.
	ctx = context.WithoutCancel(ctx)
	started := time.Now()
	defer func() { d.metrics.batchSeconds.Observe(time.Since(started).Seconds()) }()
	d.metrics.batchSize.Observe(float64(len(msgs)))
	res := Result{Received: len(msgs)}

	claimed, unserved, done, err := d.take(ctx, msgs, &res)
	if err != nil {
		return res, err // messages stay in flight and come back after the visibility timeout
	}
	claimed, unserved, done = d.fillLastStart(ctx, claimed, unserved, done, &res)
	d.detach(ctx, claimed)
	d.start(ctx, claimed)
	d.register(ctx, claimed)
	assigned, failed := d.assign(ctx, claimed)
	res.Assigned = len(assigned)
	for _, it := range assigned {
		done = append(done, it.msg.Receipt)
		d.Notify(it.inst.CloudID)
	}
	for _, it := range failed {
		res.Retried++
		d.retry(ctx, it)
	}
	over, err := d.overflow(ctx, unserved)
	res.Overflowed = len(over)
	for _, it := range over {
		done = append(done, it.msg.Receipt)
	}
	if derr := d.Queue.Delete(ctx, domain.QueuePool, done); derr != nil {
		err = errors.Join(err, fmt.Errorf("delete served messages: %w", derr))
	}
	d.metrics.jobs.WithLabelValues("assigned").Add(float64(res.Assigned))
	d.metrics.jobs.WithLabelValues("overflow").Add(float64(res.Overflowed))
	d.metrics.jobs.WithLabelValues("skipped").Add(float64(res.Skipped))
	d.metrics.jobs.WithLabelValues("retried").Add(float64(res.Retried))
	d.Log.Info("pool batch", "received", res.Received, "assigned", res.Assigned, "overflow", res.Overflowed,
		"skipped", res.Skipped, "retried", res.Retried)
	return res, err
}

// take loads the jobs of msgs and claims instances for them.
func (d *Dispatcher) take(ctx context.Context, msgs []domain.Message, res *Result) (claimed, unserved []*item, done []string, err error) {
	byPool, done := d.load(ctx, msgs, res)
	for pool, items := range byPool {
		c, u, err := d.claim(ctx, pool, items)
		if err != nil {
			return nil, nil, nil, err
		}
		claimed = append(claimed, c...)
		unserved = append(unserved, u...)
	}
	return claimed, unserved, done, nil
}

// fillLastStart tops the batch up while its last start call would carry
// fewer than MaxBatch instances and more jobs are waiting: under a burst,
// every start call but the burst's last is full.
func (d *Dispatcher) fillLastStart(ctx context.Context, claimed, unserved []*item, done []string, res *Result) ([]*item, []*item, []string) {
	for range 5 {
		stopped := 0
		for _, it := range claimed {
			if it.wasStopped {
				stopped++
			}
		}
		short := (domain.MaxBatch - stopped%domain.MaxBatch) % domain.MaxBatch
		if short == 0 || len(unserved) > 0 {
			break // full, or the pools ran out of instances anyway
		}
		// A burst still arriving fills the call within a few lingers; after
		// the burst this costs that wait, once.
		wait := time.Duration(0)
		if d.opts.Wait >= 0 && d.opts.Linger > 0 {
			wait = 3 * d.opts.Linger
		}
		more, err := d.Queue.Receive(ctx, domain.QueuePool, short, d.opts.Visibility, wait)
		if err != nil || len(more) == 0 {
			break
		}
		res.Received += len(more)
		c, u, dn, err := d.take(ctx, more, res)
		if err != nil {
			break // their messages come back after the visibility timeout
		}
		claimed, unserved, done = append(claimed, c...), append(unserved, u...), append(done, dn...)
	}
	return claimed, unserved, done
}

// load reads each message's job; jobs no longer waiting for a pool instance
// are done (their messages deleted), the rest are grouped by pool.
func (d *Dispatcher) load(ctx context.Context, msgs []domain.Message, res *Result) (map[string][]*item, []string) {
	byPool := map[string][]*item{}
	var done []string
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		id, err := jobs.Decode(m.Body)
		if err != nil {
			d.Log.Error("dropping unreadable pool-queue message", "message", m.ID, "err", err)
			done = append(done, m.Receipt)
			res.Skipped++
		}
		ids[i] = id
	}
	list, err := d.Store.ListJobs(ctx, domain.JobFilter{IDs: ids})
	if err != nil {
		d.Log.Warn("pool jobs unreadable; retried later", "count", len(ids), "err", err)
		return nil, done
	}
	byID := make(map[int64]domain.Job, len(list))
	for _, j := range list {
		byID[j.ID] = j
	}
	seen := map[int64]bool{}
	for i, m := range msgs {
		if ids[i] == 0 {
			continue
		}
		j, ok := byID[ids[i]]
		if !ok || seen[j.ID] || j.Status != domain.JobQueued || j.Route != domain.RoutePool || j.InstanceID != "" {
			done = append(done, m.Receipt) // cancelled, served, moved on, unknown, or a duplicate message
			res.Skipped++
			continue
		}
		seen[j.ID] = true
		byPool[j.Pool] = append(byPool[j.Pool], &item{msg: m, job: j})
	}
	return byPool, done
}

// claim binds as many jobs of one pool as it can to the pool's idle
// instances, running ones first, each with one guarded transition (in one
// batch), so no instance is ever claimed twice.
func (d *Dispatcher) claim(ctx context.Context, pool string, items []*item) (claimed, unserved []*item, err error) {
	cands, err := d.candidates(ctx, pool)
	if err != nil {
		return nil, nil, err
	}
	now := d.Clock.Now()
	waiting := items
	for len(waiting) > 0 && len(cands) > 0 {
		k := min(len(waiting), len(cands))
		try, rest := cands[:k], cands[k:]
		reqs := make([]domain.TransitionRequest, k)
		for i := range k {
			key := waiting[i].job.Key()
			reqs[i] = domain.TransitionRequest{ID: try[i].ID, Guard: domain.GuardOf(try[i]), Apply: func(in *domain.Instance) {
				in.State, in.Job, in.Reason = domain.StateClaimed, key, ""
				in.Deadline = d.opts.Deadlines.Until(domain.StateClaimed, now)
			}}
		}
		results, err := d.Store.TransitionBatch(ctx, reqs)
		if err != nil {
			return claimed, nil, fmt.Errorf("claim instances of pool %s: %w", pool, err)
		}
		var still []*item
		for i, r := range results {
			it := waiting[i]
			if r.Err != nil {
				d.metrics.conflicts.Inc()
				still = append(still, it)
				continue
			}
			it.inst, it.wasStopped = r.Instance, try[i].State == domain.StateStopped
			claimed = append(claimed, it)
		}
		waiting, cands = append(still, waiting[k:]...), rest
	}
	return claimed, waiting, nil
}

// candidates lists a pool's idle instances in the order they should serve:
// running hot members, other running instances, then stopped ones; the
// longest idle first within each group.
func (d *Dispatcher) candidates(ctx context.Context, pool string) ([]domain.Instance, error) {
	rows, err := d.Store.ListInstances(ctx, domain.InstanceFilter{Pool: pool, States: []domain.State{domain.StateReady, domain.StateStopped}})
	if err != nil {
		return nil, fmt.Errorf("list instances of pool %s: %w", pool, err)
	}
	now, hash := d.Clock.Now(), d.SpecHash(pool)
	rank := func(in domain.Instance) int {
		switch {
		case in.State == domain.StateReady && in.Role == domain.RoleHot:
			return 0
		case in.State == domain.StateReady:
			return 1
		}
		return 2
	}
	out := slices.DeleteFunc(rows, func(in domain.Instance) bool {
		return in.Detached() || in.Expired(now) || (hash != "" && in.SpecHash != hash && in.Role != domain.RoleOnDemand)
	})
	slices.SortStableFunc(out, func(a, b domain.Instance) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), a.StateSince.Compare(b.StateSince), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// detach marks the claimed instances as out of pool management in the cloud:
// one tag call for the batch. The store already says so; the tag is for
// people and tools reading the cloud console, so a failure is only logged.
func (d *Dispatcher) detach(ctx context.Context, items []*item) {
	var ids []string
	for _, it := range items {
		ids = append(ids, it.inst.CloudID)
	}
	for _, batch := range domain.Chunk(ids, d.opts.TagBatch) {
		if err := d.Cloud.Tag(ctx, batch, map[string]string{domain.TagStatus: "detached"}); err != nil {
			d.metrics.cloudErrors.WithLabelValues("CreateTags").Inc()
			d.Log.Warn("tag detached instances", "count", len(batch), "err", err)
		}
	}
	d.metrics.detached.Add(float64(len(ids)))
}

// start starts the stopped instances, at most MaxBatch per call. Items of a
// failed call are marked failed: their instance is rolled back and their
// job retried.
func (d *Dispatcher) start(ctx context.Context, items []*item) {
	var stopped []*item
	for _, it := range items {
		if it.wasStopped {
			stopped = append(stopped, it)
		}
	}
	for _, batch := range domain.Chunk(stopped, domain.MaxBatch) {
		ids := make([]string, len(batch))
		for i, it := range batch {
			ids[i] = it.inst.CloudID
		}
		if err := d.Cloud.Start(ctx, ids); err != nil {
			d.metrics.cloudErrors.WithLabelValues("StartInstances").Inc()
			for _, it := range batch {
				it.err, it.startFailed = fmt.Errorf("start: %w", err), true
			}
			continue
		}
		d.metrics.started.Add(float64(len(batch)))
	}
}

// register creates a just-in-time runner for each job, with the job's own
// labels so that GitHub hands this runner this job.
func (d *Dispatcher) register(ctx context.Context, items []*item) {
	sem := make(chan struct{}, d.opts.RegisterParallelism)
	var wg sync.WaitGroup
	for _, it := range items {
		if it.err != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			name := RunnerName(it.inst.ID, it.job.ID)
			reg, err := d.GitHub.RegisterRunner(ctx, d.Scope(it.job), name, it.job.Labels)
			if err != nil {
				it.err = fmt.Errorf("register runner: %w", err)
				return
			}
			it.reg = reg
		}()
	}
	wg.Wait()
}

// RunnerName names the just-in-time runner of one job on one instance.
func RunnerName(instanceID string, jobID int64) string {
	return fmt.Sprintf("%s-%d", instanceID, jobID)
}

// InstanceOfRunner returns the instance id in a name RunnerName made, so a
// webhook naming the runner that took a job says which instance runs it.
func InstanceOfRunner(name string) (string, bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= len("bp-") || i == len(name)-1 {
		return "", false
	}
	if _, err := strconv.ParseInt(name[i+1:], 10, 64); err != nil || !strings.HasPrefix(name, "bp-") {
		return "", false
	}
	return name[:i], true
}

// assign gives each claimed instance its runner registration, then records
// each job's assignment, one batch each; a job that changed meanwhile
// (cancelled, say) fails and its instance is given back.
func (d *Dispatcher) assign(ctx context.Context, items []*item) (assigned, failed []*item) {
	var ready []*item
	for _, it := range items {
		if it.err != nil {
			failed = append(failed, it)
		} else {
			ready = append(ready, it)
		}
	}
	if len(ready) == 0 {
		return nil, failed
	}
	now := d.Clock.Now()
	reqs := make([]domain.JobTransitionRequest, len(ready))
	for i, it := range ready {
		reg, instID := it.reg, it.inst.ID
		reqs[i] = domain.JobTransitionRequest{ID: it.job.ID, Guard: domain.JobGuardOf(it.job), Apply: func(j *domain.Job) {
			j.Status, j.Via, j.InstanceID, j.AssignedAt = domain.JobAssigned, domain.ViaPool, instID, now
			j.RunnerName, j.RunnerID, j.Reason = reg.Name, reg.RunnerID, ""
		}}
	}
	results, err := d.Store.TransitionJobs(ctx, reqs)
	var recorded []*item
	for i, it := range ready {
		switch {
		case err != nil:
			it.err = fmt.Errorf("record assignment: %w", err)
		case results[i].Err != nil:
			it.err = fmt.Errorf("record assignment: %w", results[i].Err)
		default:
			it.job = results[i].Job
			recorded = append(recorded, it)
			continue
		}
		failed = append(failed, it)
	}
	// The runner goes on the instance last: its agent starts it as soon as
	// it is there, so the job must already be the instance's.
	assigned, lost := d.giveRunners(ctx, recorded)
	for _, it := range lost {
		d.unassign(ctx, it)
	}
	return assigned, append(failed, lost...)
}

// unassign returns a job whose instance could not take its runner to
// queued, so that its message, made visible again, serves it afresh.
func (d *Dispatcher) unassign(ctx context.Context, it *item) {
	j, err := d.Store.TransitionJob(ctx, it.job.ID, domain.JobGuardOf(it.job), func(x *domain.Job) {
		x.Status, x.Via, x.InstanceID, x.AssignedAt = domain.JobQueued, "", "", time.Time{}
		x.RunnerName, x.RunnerID = "", 0
	})
	if err != nil {
		d.Log.Warn("unassign pool job", "job", it.job.ID, "err", err)
		return
	}
	it.job = j
}

// giveRunners records on each instance the runner registered for it (its
// agent starts that runner), in one batch.
func (d *Dispatcher) giveRunners(ctx context.Context, items []*item) (ok, failed []*item) {
	reqs := make([]domain.TransitionRequest, len(items))
	for i, it := range items {
		reg := it.reg
		reqs[i] = domain.TransitionRequest{ID: it.inst.ID, Guard: domain.GuardOf(it.inst), Apply: func(in *domain.Instance) {
			in.RunnerName, in.RunnerConfig = reg.Name, reg.JITConfig
		}}
	}
	results, err := d.Store.TransitionBatch(ctx, reqs)
	for i, it := range items {
		switch {
		case err != nil:
			it.err = fmt.Errorf("record runner: %w", err)
		case results[i].Err != nil:
			it.err = fmt.Errorf("record runner: %w", results[i].Err)
		default:
			it.inst = results[i].Instance
			ok = append(ok, it)
			continue
		}
		failed = append(failed, it)
	}
	return ok, failed
}

// retry gives a failed item's instance back to its pool and lets its job's
// message come back to the queue after a short delay.
func (d *Dispatcher) retry(ctx context.Context, it *item) {
	d.Log.Warn("pool job not served; retrying", "job", it.job.ID, "pool", it.job.Pool, "instance", it.inst.ID, "err", it.err)
	back := domain.StateReady
	if it.wasStopped && it.startFailed {
		back = domain.StateStopped
	}
	if it.inst.ID != "" {
		_, err := d.Store.Transition(ctx, it.inst.ID, domain.GuardOf(it.inst), func(in *domain.Instance) {
			in.State, in.Job, in.RunnerName, in.RunnerConfig = back, "", "", ""
			in.Deadline = d.opts.Deadlines.Until(back, d.Clock.Now())
		})
		if err != nil {
			d.Log.Warn("give instance back to its pool", "instance", it.inst.ID, "err", err)
		}
	}
	if it.reg.RunnerID != 0 {
		if err := d.GitHub.DeleteRunner(ctx, d.Scope(it.job), it.reg.RunnerID); err != nil && !errors.Is(err, domain.ErrNotFound) {
			d.Log.Warn("remove unused runner registration", "runner", it.reg.Name, "err", err)
		}
	}
	if err := d.Queue.ChangeVisibility(ctx, domain.QueuePool, it.msg.Receipt, jobs.RequeueDelay); err != nil {
		d.Log.Warn("requeue pool job", "job", it.job.ID, "err", err)
	}
}

// overflow sends jobs no pool instance could take to the launch queue. The
// send comes first: should recording the new route then fail, the job is in
// both queues, and its one guarded assignment decides who serves it.
func (d *Dispatcher) overflow(ctx context.Context, items []*item) ([]*item, error) {
	if len(items) == 0 {
		return nil, nil
	}
	sends := make([]domain.SendRequest, len(items))
	reqs := make([]domain.JobTransitionRequest, len(items))
	for i, it := range items {
		sends[i] = jobs.SendRequest(it.job, 0)
		reqs[i] = domain.JobTransitionRequest{ID: it.job.ID, Guard: domain.JobGuardOf(it.job), Apply: func(j *domain.Job) {
			j.Route, j.Reason = domain.RouteLaunch, "pool "+j.Pool+" had no idle instance"
		}}
	}
	if err := d.Queue.Send(ctx, domain.QueueLaunch, sends); err != nil {
		return nil, fmt.Errorf("overflow %d jobs to the launch queue: %w", len(sends), err)
	}
	results, err := d.Store.TransitionJobs(ctx, reqs)
	if err != nil {
		return nil, fmt.Errorf("record overflow: %w", err)
	}
	var moved []*item
	for i, r := range results {
		if r.Err == nil {
			moved = append(moved, items[i])
		}
	}
	return moved, nil
}
