package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

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

// retry gives failed items' instances back to their pools, stopped if they
// never left stopped, and lets each job's message come back to the queue
// after a delay that doubles with its receives: while GitHub or the cloud
// is down, a job is not tried every few seconds, each try costing a tag
// call and maybe a start. Such an outage fails a whole batch alike, so the
// batch's failures make one line; each job's own is at debug.
func (d *Dispatcher) retry(ctx context.Context, items []*item, held Held, res *Result) {
	if len(items) == 0 {
		return
	}
	res.Retried += len(items)
	causes := map[string]int{}
	var notBack, notRequeued tally
	for _, it := range items {
		causes[causeOf(it.Err)]++
		delay := jobs.RetryDelay(it.msg.Receives)
		d.Log.Debug("pool job not served; retrying", "job", it.Job.ID, "pool", it.Job.Pool, "instance", it.Inst.ID,
			"receives", it.msg.Receives, "in", delay, "err", it.Err)
		notBack.add(d.giveBack(ctx, it, "retried"))
		held.Let(it.msg.Receipt)
		notRequeued.add(d.Queue.ChangeVisibility(ctx, domain.QueuePool, it.msg.Receipt, delay))
	}
	d.Log.Warn("pool jobs not served; retrying", "count", len(items), "causes", causes, "first_err", items[0].Err)
	notBack.log(d.Log, "give instances back to their pools")
	notRequeued.log(d.Log, "delay pool jobs' retries; they come back after the visibility timeout")
}

// giveBack rolls a failed item's handover back: its job unbound, its
// instance back in its pool. what says what becomes of the job, for the
// instance's reason.
func (d *Dispatcher) giveBack(ctx context.Context, it *item, what string) error {
	back := domain.StateReady
	if it.wasStopped && !it.started {
		back = domain.StateStopped
	}
	undo := serving.Undo{Back: back, Deadline: d.opts.Deadlines.Until(back, d.Clock.Now())}
	_, _, err := d.pipeline.RollBack(ctx, &it.Handover, undo, what+": "+it.Err.Error())
	return err
}

// causeOf names the kind of a failure, for the one line that sums up a
// batch's: a few fixed words, whatever the error's text.
func causeOf(err error) string {
	if len(domain.RefusedIDs(err)) > 0 {
		return "refused"
	}
	for _, c := range []struct {
		err  error
		name string
	}{
		{domain.ErrRateLimited, "rate_limited"},
		{domain.ErrThrottled, "throttled"},
		{domain.ErrUnauthorized, "unauthorized"},
		{domain.ErrInsufficientCapacity, "insufficient_capacity"},
		{domain.ErrConflict, "conflict"},
		{domain.ErrNotFound, "not_found"},
		{context.DeadlineExceeded, "timeout"},
	} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "other"
}

// tally counts the failures of one operation over a batch, keeping the
// first, so that they are logged in one line.
type tally struct {
	n     int
	first error
}

func (t *tally) add(err error) {
	if err == nil {
		return
	}
	if t.n == 0 {
		t.first = err
	}
	t.n++
}

func (t *tally) log(log *slog.Logger, what string) {
	if t.n > 0 {
		log.Warn(what, "failed", t.n, "first_err", t.first)
	}
}

// overflow sends jobs no pool instance could take, or start, to the launch
// queue. The send comes first: should recording the new route then fail,
// the job is in both queues, and its one guarded assignment decides who
// serves it.
func (d *Dispatcher) overflow(ctx context.Context, items []*item) ([]*item, error) {
	if len(items) == 0 {
		return nil, nil
	}
	sends := make([]domain.SendRequest, len(items))
	reqs := make([]domain.JobTransitionRequest, len(items))
	for i, it := range items {
		sends[i] = jobs.SendRequest(it.Job, 0)
		why := ""
		if it.noCapacity() {
			why = "the cloud had no capacity to start pool " + it.Job.Pool + "'s stopped instance"
		}
		reqs[i] = d.verbs.Overflow(it.Job, why)
	}
	if err := d.Queue.Send(ctx, domain.QueueLaunch, sends); err != nil {
		return nil, fmt.Errorf("overflow %d jobs to the launch queue: %w", len(sends), err)
	}
	results, err := d.Store.TransitionJobs(ctx, reqs)
	if err != nil {
		return nil, fmt.Errorf("record overflow: %w", err)
	}
	var moved []*item
	var unrecorded tally
	for i, r := range results {
		if r.Err != nil {
			// Its pool message comes back after the visibility timeout and
			// is served from the job as it is then.
			d.Log.Debug("overflow not recorded", "job", items[i].Job.ID, "pool", items[i].Job.Pool, "err", r.Err)
			unrecorded.add(r.Err)
			continue
		}
		moved = append(moved, items[i])
	}
	unrecorded.log(d.Log, "record overflowed pool jobs; their messages come back")
	return moved, nil
}
