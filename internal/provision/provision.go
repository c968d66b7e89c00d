// Package provision serves the launch queue the way seeds 001 and 004
// describe: reuse first (the pickup manager takes idle instances of the
// job's class off the resource-pool queue, claim workers claim them with one
// guarded transition and check heartbeat and registration), then creation
// for whatever is left (one fleet request, all-or-nothing), then
// post-provision (success, rollback, or dumping everything on an unexpected
// error).
//
// A provision request is one job: GitHub jobs each need one runner. Jobs of
// the same runner class received together share one fleet request, which is
// where batching pays.
package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// Options tune provisioning; zero values take the defaults, which come from
// the seeds where they give one.
type Options struct {
	BatchMax   int           // jobs received per cycle; default 100
	Visibility time.Duration // default 5 min
	Wait       time.Duration // long poll; default 1 s, negative none
	// Parallelism bounds jobs provisioned at once; default 64.
	Parallelism int
	// HeartbeatMaxAge: a reused instance whose last heartbeat is older
	// fails its post-claim check (seed 001: ~15 s).
	HeartbeatMaxAge time.Duration
	// RegistrationTimeout: a reused instance must register for the job
	// within this (seed 001: ~10 s).
	RegistrationTimeout time.Duration
	// CreationTimeout: a new instance must boot and register within this.
	CreationTimeout time.Duration // default 5 min
	// RequeueDelay: a resource-pool entry that does not fit goes back with
	// this delay (seed 004: e.g. 3 s).
	RequeueDelay time.Duration
	// SeenLimit: the same instance seen this many times in one search
	// means the pool is locally exhausted (seed 004: default 5).
	SeenLimit int
	// CreateBatch caps machines per fleet request; default 100.
	CreateBatch  int
	ControllerID string
	Deadlines    domain.Deadlines
}

func (o *Options) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&o.Visibility, 5*time.Minute)
	if o.Wait == 0 {
		o.Wait = time.Second
	}
	set(&o.HeartbeatMaxAge, 15*time.Second)
	set(&o.RegistrationTimeout, 10*time.Second)
	set(&o.CreationTimeout, 5*time.Minute)
	set(&o.RequeueDelay, 3*time.Second)
	if o.BatchMax <= 0 {
		o.BatchMax = 100
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 64
	}
	if o.SeenLimit <= 0 {
		o.SeenLimit = 5
	}
	if o.CreateBatch <= 0 {
		o.CreateBatch = 100
	}
	if o.Deadlines == (domain.Deadlines{}) {
		o.Deadlines = domain.DefaultDeadlines()
	}
}

// Registrations lets a claim worker wait for an instance's registered
// signal (agents.Hub).
type Registrations interface {
	Wait(instanceID string) <-chan struct{}
	Forget(instanceID string)
}

// Deps are the provisioner's collaborators.
type Deps struct {
	Store         domain.Store
	Queue         domain.Queue
	Cloud         domain.Cloud
	GitHub        domain.GitHub
	Clock         domain.Clock
	Log           *slog.Logger
	Scope         func(j domain.Job) domain.Scope
	Notify        func(cloudID string)
	Registrations Registrations
}

// Provisioner serves the launch queue.
type Provisioner struct {
	Deps
	opts    Options
	metrics *metrics

	mu      sync.Mutex
	pickups map[string]*pickup
	// fleetCap remembers, per class, how many machines the last partially
	// fulfilled fleet got, so the next request asks for what can come.
	fleetCap map[string]int
	images   sync.Map // image name → id, resolved once per process
}

// New returns a provisioner; reg may be nil.
func New(d Deps, reg prometheus.Registerer, opts Options) (*Provisioner, error) {
	if opts.ControllerID == "" {
		return nil, errors.New("provision: a controller id is required to tag machines")
	}
	opts.defaults()
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	if d.Notify == nil {
		d.Notify = func(string) {}
	}
	return &Provisioner{Deps: d, opts: opts, metrics: m, pickups: map[string]*pickup{}, fleetCap: map[string]int{}}, nil
}

func (p *Provisioner) pickupFor(class string) *pickup {
	p.mu.Lock()
	defer p.mu.Unlock()
	pm, ok := p.pickups[class]
	if !ok {
		pm = &pickup{queue: p.Queue, clock: p.Clock, class: class, requeueDelay: p.opts.RequeueDelay, seenLimit: p.opts.SeenLimit}
		p.pickups[class] = pm
	}
	return pm
}

// Run serves the launch queue until ctx ends; jobs already received are
// provisioned to the end.
func (p *Provisioner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		msgs, err := p.Queue.Receive(ctx, domain.QueueLaunch, p.opts.BatchMax, p.opts.Visibility, max(p.opts.Wait, 0))
		if err != nil {
			if ctx.Err() == nil {
				p.Log.Warn("launch queue receive failed", "err", err)
				select {
				case <-ctx.Done():
				case <-p.Clock.After(time.Second):
				}
			}
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Serve(context.WithoutCancel(ctx), msgs)
		}()
	}
	return nil
}

// request is one job being provisioned.
type request struct {
	msg  domain.Message
	job  domain.Job
	inst domain.Instance // the instance serving it, once found
	// outcome: "reuse", "cold", or "" (not served: requeue).
	outcome domain.Via
	err     error
}

// Serve provisions one received batch and settles every message.
func (p *Provisioner) Serve(ctx context.Context, msgs []domain.Message) {
	byClass := map[string][]*request{}
	var done []string
	for _, m := range msgs {
		id, err := jobs.Decode(m.Body)
		if err != nil {
			p.Log.Error("dropping unreadable launch-queue message", "message", m.ID, "err", err)
			done = append(done, m.Receipt)
			continue
		}
		j, err := p.Store.GetJob(ctx, id)
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			p.Log.Warn("launch job unreadable; retried later", "job", id, "err", err)
			continue
		}
		if err != nil || j.Status != domain.JobQueued || j.InstanceID != "" {
			done = append(done, m.Receipt) // cancelled, served elsewhere, or unknown
			continue
		}
		byClass[j.Runner] = append(byClass[j.Runner], &request{msg: m, job: j})
	}
	if err := p.Queue.Delete(ctx, domain.QueueLaunch, done); err != nil {
		p.Log.Warn("delete settled launch messages", "err", err)
	}
	var wg sync.WaitGroup
	for class, reqs := range byClass {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.serveClass(ctx, class, reqs)
		}()
	}
	wg.Wait()
}

// serveClass runs selection for every request of one class in parallel,
// creation for the rest, then settles each request.
func (p *Provisioner) serveClass(ctx context.Context, class string, reqs []*request) {
	led := &ledger{}
	defer func() {
		if r := recover(); r != nil {
			p.Log.Error("provisioning panicked; releasing everything it held", "class", class, "panic", fmt.Sprint(r))
			p.dump(ctx, led)
			for _, rq := range reqs {
				rq.outcome, rq.err = "", fmt.Errorf("provisioning failed: %v", r)
			}
		}
		p.settle(ctx, reqs)
	}()

	sem := make(chan struct{}, p.opts.Parallelism)
	var wg sync.WaitGroup
	for _, rq := range reqs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			p.selectFor(ctx, class, rq, led)
		}()
	}
	wg.Wait()

	var rest []*request
	for _, rq := range reqs {
		if rq.outcome == "" && rq.err == nil {
			rest = append(rest, rq)
		}
	}
	p.create(ctx, class, rest, led)
}

// settle deletes the messages of served jobs and sends the others back to
// the launch queue with a backoff.
func (p *Provisioner) settle(ctx context.Context, reqs []*request) {
	var done []string
	for _, rq := range reqs {
		done = append(done, rq.msg.Receipt)
		switch rq.outcome {
		case domain.ViaReuse, domain.ViaCold:
			p.metrics.jobs.WithLabelValues(string(rq.outcome)).Inc()
			continue
		}
		p.metrics.jobs.WithLabelValues("requeued").Inc()
		if err := p.requeue(ctx, rq); err != nil {
			p.Log.Warn("requeue launch job", "job", rq.job.ID, "err", err)
			done = done[:len(done)-1] // keep its message: it comes back after the visibility timeout
		}
	}
	if err := p.Queue.Delete(ctx, domain.QueueLaunch, done); err != nil {
		p.Log.Warn("delete provisioned launch messages", "err", err)
	}
}

// requeue sends an unserved job back with a growing delay.
func (p *Provisioner) requeue(ctx context.Context, rq *request) error {
	j, err := p.Store.GetJob(ctx, rq.job.ID)
	if err != nil || j.Status != domain.JobQueued || j.InstanceID != "" {
		return nil // it moved on: nothing to requeue
	}
	j, err = p.Store.TransitionJob(ctx, j.ID, domain.JobGuardOf(j), func(x *domain.Job) {
		x.Attempts++
		if rq.err != nil {
			x.Reason = rq.err.Error()
		}
	})
	if err != nil {
		return err
	}
	delay := min(time.Duration(1<<min(j.Attempts, 6))*time.Second, time.Minute)
	p.Log.Warn("launch job not served; retrying", "job", j.ID, "attempt", j.Attempts, "in", delay, "reason", j.Reason)
	return p.Queue.Send(ctx, domain.QueueLaunch, []domain.SendRequest{jobs.SendRequest(j, delay)})
}

// ledger records what a class's provisioning holds, for the dump.
type ledger struct {
	mu      sync.Mutex
	claimed []domain.Instance // selected, not yet handed to a job
	created []domain.Instance // created, not yet validated
}

func (l *ledger) add(list *[]domain.Instance, in domain.Instance) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*list = append(*list, in)
}

func (l *ledger) drop(list *[]domain.Instance, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, in := range *list {
		if in.ID == id {
			*list = append((*list)[:i], (*list)[i+1:]...)
			return
		}
	}
}

// dump is seed 001's safety net: on an unexpected error, every selected
// instance is released and every created one terminated.
func (p *Provisioner) dump(ctx context.Context, l *ledger) {
	l.mu.Lock()
	claimed, created := l.claimed, l.created
	l.claimed, l.created = nil, nil
	l.mu.Unlock()
	for _, in := range claimed {
		p.giveBack(ctx, in)
	}
	p.terminate(ctx, created, "provisioning failed")
}
