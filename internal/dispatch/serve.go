package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

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
				it.err = fmt.Errorf("start: %w", err)
			}
			continue
		}
		for _, it := range batch {
			it.started = true
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

// retry gives a failed item's instance back to its pool, stopped if it
// never left stopped, and lets its job's message come back to the queue
// after a short delay.
func (d *Dispatcher) retry(ctx context.Context, it *item) {
	d.Log.Warn("pool job not served; retrying", "job", it.job.ID, "pool", it.job.Pool, "instance", it.inst.ID, "err", it.err)
	back := domain.StateReady
	if it.wasStopped && !it.started {
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
