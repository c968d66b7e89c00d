package dispatch

import (
	"context"
	"fmt"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/serving"
)

// detach marks the claimed instances as out of pool management in the cloud:
// one tag call for the batch. The store already says so; the tag is for
// people and tools reading the cloud console, so a failure is only logged.
func (d *Dispatcher) detach(ctx context.Context, items []*item) {
	var ids []string
	for _, it := range items {
		ids = append(ids, it.Inst.CloudID)
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
			ids[i] = it.Inst.CloudID
		}
		if err := d.Cloud.Start(ctx, ids); err != nil {
			d.metrics.cloudErrors.WithLabelValues("StartInstances").Inc()
			for _, it := range batch {
				it.Err = fmt.Errorf("start: %w", err)
			}
			continue
		}
		for _, it := range batch {
			it.started = true
		}
		d.metrics.started.Add(float64(len(batch)))
	}
}

// retry gives a failed item's instance back to its pool, stopped if it
// never left stopped, and lets its job's message come back to the queue
// after a short delay.
func (d *Dispatcher) retry(ctx context.Context, it *item) {
	d.Log.Warn("pool job not served; retrying", "job", it.Job.ID, "pool", it.Job.Pool, "instance", it.Inst.ID, "err", it.Err)
	back := domain.StateReady
	if it.wasStopped && !it.started {
		back = domain.StateStopped
	}
	undo := serving.Undo{Back: back, Deadline: d.opts.Deadlines.Until(back, d.Clock.Now())}
	if _, _, err := d.pipeline.RollBack(ctx, &it.Handover, undo, "retried: "+it.Err.Error()); err != nil {
		d.Log.Warn("give instance back to its pool", "instance", it.Inst.ID, "err", err)
	}
	if err := d.Queue.ChangeVisibility(ctx, domain.QueuePool, it.msg.Receipt, jobs.RequeueDelay); err != nil {
		d.Log.Warn("requeue pool job", "job", it.Job.ID, "err", err)
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
		sends[i] = jobs.SendRequest(it.Job, 0)
		reqs[i] = d.verbs.Overflow(it.Job)
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
