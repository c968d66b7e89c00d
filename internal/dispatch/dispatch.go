// Package dispatch serves the pool queue (DESIGN: Warm pools, "Pool Queue
// Processing"): it receives jobs in batches, groups them by pool, claims warm
// instances for all of them at once (running before stopped), detaches them
// with one tag call, starts the stopped ones at most 50 per call, registers
// a just-in-time runner for each job, and overflows the rest to the launch
// queue.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/serving"
)

// Options tune the dispatcher; zero values take the defaults.
type Options struct {
	// BatchMax is the most jobs taken per cycle. The warm-pool design takes 10; that
	// is a floor: under a burst a larger batch costs far fewer cloud calls.
	BatchMax   int           // default 500
	Visibility time.Duration // default 60 s
	Wait       time.Duration // long poll when the queue is empty; default 1 s, negative none
	Deadlines  domain.Deadlines
	// RegisterParallelism bounds concurrent runner registrations.
	RegisterParallelism int // default 16
	// TagBatch is the most ids per tag call; default domain.MaxBatch, the
	// most a provider takes in one call.
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
		o.TagBatch = domain.MaxBatch
	}
	if o.Linger == 0 {
		o.Linger = 20 * time.Millisecond
	}
}

// Deps are the dispatcher's collaborators.
type Deps struct {
	Store  Store
	Queue  domain.Queue
	Cloud  domain.Cloud
	GitHub domain.GitHub
	Clock  domain.Clock
	Log    *slog.Logger
	// Scope says where a job's runner registers.
	Scope func(j domain.Job) domain.Scope
	// SpecHash returns a pool's current spec hash ("" when not yet known),
	// so that outdated instances are not handed out.
	SpecHash func(ctx context.Context, pool string) string
	// Notify wakes an instance's agent after its assignment.
	Notify func(cloudID string)
	// Hold keeps the messages of a batch in hand invisible until it is
	// stopped (keepalive.Hold): registering a batch's runners can outlast
	// the visibility timeout, after which another replica would take the
	// same jobs and claim a second instance for each. Nil: not held.
	Hold func(queue string, receipts []string, visibility time.Duration) Held
}

// Held is a hold on the messages of a batch in hand.
type Held interface {
	// Let drops receipts from the hold, before their messages get a
	// retry's delay.
	Let(receipts ...string)
	Stop()
}

type notHeld struct{}

func (notHeld) Let(...string) {}
func (notHeld) Stop()         {}

// Dispatcher serves the pool queue.
type Dispatcher struct {
	Deps
	opts     Options
	metrics  *metrics
	verbs    domain.Lifecycle
	pipeline *serving.Pipeline
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
		d.SpecHash = func(context.Context, string) string { return "" }
	}
	verbs := domain.NewLifecycle(opts.Deadlines)
	return &Dispatcher{Deps: d, opts: opts, metrics: m, verbs: verbs, pipeline: &serving.Pipeline{
		Store: d.Store, GitHub: d.GitHub, Clock: d.Clock, Log: d.Log, Verbs: verbs, Scope: d.Scope,
		Notify: d.Notify, Parallelism: opts.RegisterParallelism,
	}}, nil
}

// Loop serves the queue, a batch a step. A batch already received is
// carried through to the end, so a shutdown leaves nothing half-claimed.
func (d *Dispatcher) Loop() loop.Loop {
	return loop.Loop{Name: "dispatch", Step: func(ctx context.Context) error {
		res, err := d.Step(ctx)
		if err == nil && res.Received == 0 && d.opts.Wait < 0 {
			// No long poll to wait in: without a pause an empty queue
			// would be received from in a tight loop.
			d.sleep(ctx, idlePoll)
		}
		return err
	}}
}

// idlePoll is how long Run waits after an empty receive when it does not
// long-poll (Options.Wait negative).
const idlePoll = time.Second

// sleep waits d on the clock, or until ctx ends, and leaves no timer behind.
func (d *Dispatcher) sleep(ctx context.Context, wait time.Duration) {
	ch, stop := clock.Closes(d.Clock, wait)
	defer stop()
	select {
	case <-ctx.Done():
	case <-ch:
	}
}

// Result counts what one step did.
type Result struct {
	Received, Assigned, Overflowed, Skipped, Retried int
	// NoCapacity counts jobs moved to the launch queue because the cloud
	// had no capacity to start the stopped instance claimed for them (not
	// counted in Overflowed).
	NoCapacity int
	// OverflowFailed counts jobs bound for the launch queue whose move
	// failed or was not recorded: their pool messages come back after the
	// visibility timeout.
	OverflowFailed int
}

// item is one received job on its way through a step: its handover to the
// instance claimed for it (Err says why it failed and goes back to the
// queue).
type item struct {
	serving.Handover
	msg domain.Message
	// wasStopped: the instance must be started; started: it was, so it
	// is no longer stopped should the job go back to the queue.
	wasStopped, started bool
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

	held := Held(notHeld{})
	if d.Hold != nil {
		held = d.Hold(domain.QueuePool, jobs.Receipts(msgs), d.opts.Visibility)
	}
	defer held.Stop()
	done, err := d.serve(ctx, msgs, held, &res)
	if derr := d.Queue.Delete(ctx, domain.QueuePool, done); derr != nil {
		err = errors.Join(err, fmt.Errorf("delete served messages: %w", derr))
	}
	d.metrics.jobs.WithLabelValues("assigned").Add(float64(res.Assigned))
	d.metrics.jobs.WithLabelValues("overflow").Add(float64(res.Overflowed))
	d.metrics.jobs.WithLabelValues("overflow_no_capacity").Add(float64(res.NoCapacity))
	d.metrics.jobs.WithLabelValues("skipped").Add(float64(res.Skipped))
	d.metrics.jobs.WithLabelValues("retried").Add(float64(res.Retried))
	d.metrics.jobs.WithLabelValues("overflow_failed").Add(float64(res.OverflowFailed))
	d.Log.Info("pool batch", "received", res.Received, "assigned", res.Assigned, "overflow", res.Overflowed,
		"overflow_no_capacity", res.NoCapacity, "skipped", res.Skipped, "retried", res.Retried, "overflow_failed", res.OverflowFailed)
	return res, err
}

// serve claims instances for a batch's jobs, readies them, assigns them and
// overflows what no instance could take, or start for lack of capacity. It
// returns the receipts of the messages done with.
func (d *Dispatcher) serve(ctx context.Context, msgs []domain.Message, held Held, res *Result) ([]string, error) {
	claimed, unserved, done, err := d.take(ctx, msgs, res)
	if err != nil {
		// Instances already claimed for other pools go back: left as
		// they are, each would hold a job and no runner until its expiry,
		// while the job's message came back to claim another. The other
		// messages come back after the visibility timeout.
		for _, it := range claimed {
			it.Err = fmt.Errorf("batch abandoned: %w", err)
		}
		d.retry(ctx, claimed, held, res)
		return done, err
	}
	claimed, unserved, done = d.fillLastStart(ctx, claimed, unserved, done, res)
	d.detach(ctx, claimed)
	d.start(ctx, claimed)
	claimed, unstartable := d.setAsideUnstartable(ctx, claimed)
	byHandover := make(map[*serving.Handover]*item, len(claimed))
	hs := make([]*serving.Handover, len(claimed))
	for i, it := range claimed {
		hs[i], byHandover[&it.Handover] = &it.Handover, it
	}
	assigned, failed := d.pipeline.HandOver(ctx, hs)
	res.Assigned = len(assigned)
	for _, h := range assigned {
		h.Done()
		done = append(done, byHandover[h].msg.Receipt)
	}
	retried := make([]*item, len(failed))
	for i, h := range failed {
		retried[i] = byHandover[h]
	}
	d.retry(ctx, retried, held, res)
	over, err := d.overflow(ctx, append(unserved, unstartable...))
	res.OverflowFailed = len(unserved) + len(unstartable) - len(over)
	for _, it := range over {
		if it.noCapacity() {
			res.NoCapacity++
		} else {
			res.Overflowed++
		}
		done = append(done, it.msg.Receipt)
	}
	return done, err
}

// take loads the jobs of msgs and claims instances for them. On an error
// it still returns the items claimed so far, and the receipts of messages
// done with: the caller serves those items or gives their instances back.
func (d *Dispatcher) take(ctx context.Context, msgs []domain.Message, res *Result) (claimed, unserved []*item, done []string, err error) {
	byPool, done, err := d.load(ctx, msgs, res)
	if err != nil {
		return nil, nil, done, err
	}
	for pool, items := range byPool {
		c, u, err := d.claim(ctx, pool, items)
		claimed = append(claimed, c...)
		if err != nil {
			return claimed, nil, done, err
		}
		unserved = append(unserved, u...)
	}
	return claimed, unserved, done, nil
}

// load reads each message's job; jobs no longer waiting for a pool instance
// are done (their messages deleted), the rest are grouped by pool. When the
// jobs cannot be read, only unreadable messages are done: the others stay
// in flight and come back after the visibility timeout.
func (d *Dispatcher) load(ctx context.Context, msgs []domain.Message, res *Result) (map[string][]*item, []string, error) {
	got, done, err := jobs.ReadMessages(ctx, d.Store, d.Log, domain.QueuePool, msgs, func(j domain.Job) bool {
		return j.Status == domain.JobQueued && j.Route == domain.RoutePool && j.InstanceID == ""
	})
	res.Skipped += len(done)
	if err != nil {
		return nil, done, err
	}
	byPool := map[string][]*item{}
	for _, r := range got {
		byPool[r.Job.Pool] = append(byPool[r.Job.Pool], &item{msg: r.Msg, Handover: serving.Handover{Job: r.Job}})
	}
	return byPool, done, nil
}
