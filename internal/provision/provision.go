// Package provision serves the launch queue the way DESIGN
// describes (Provisioning): reuse first (the pickup manager takes idle instances of the
// job's class off the resource-pool queue, claim workers claim them with one
// guarded transition and check heartbeat and registration), then creation
// for whatever is left (one fleet request per class), then post-provision
// (success, rollback, or dumping everything on an unexpected error).
//
// A provision request is one job: GitHub jobs each need one runner. Jobs of
// the same runner class received together share one fleet request, which is
// where batching pays; validation is per job, since each new instance
// registers for its own job, and so is the seed's all-or-nothing: a fleet
// the cloud fills in part serves the jobs it filled, and only the others
// are requeued.
//
// Post-provision, as decided here: a claimed instance that fails a check
// (stale heartbeat, no registration in time) is terminated and the next
// candidate tried, as long as the job still waits; one given up for a
// reason that is not its own (GitHub refused the runner, the store, a
// cancelled job, a caller that gave up) goes back to ready, with its old
// expiry, and to its resource pool. A panic anywhere in a class's
// provisioning dumps what it holds (claimed instances back to the pool,
// created ones terminated, their jobs unbound and requeued); jobs already
// served keep their instances. A runner registered for an instance that
// will not run it is deleted. A job the cloud will never serve as it asks
// (its image does not resolve, or the cloud refuses the launch as invalid)
// is rejected with the reason instead of being retried.
package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/launch"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/serving"
)

// Options tune provisioning; zero values take the defaults, which come from
// the design where it gives one.
type Options struct {
	BatchMax int // jobs received per cycle; default 100
	// Visibility is how long a received message stays invisible; with
	// Deps.Hold, messages in hand are kept invisible, so this is how soon
	// one held by a process that died is taken again. Default 1 min.
	Visibility time.Duration
	Wait       time.Duration // long poll; default 1 s; negative: none, and Run pauses 1 s after an empty receive
	// Linger: see jobs.BatchOptions. A burst reaches the launch queue in
	// the intake's and the dispatcher's batches, and each receive served
	// alone makes its own fleet. Default 20 ms, as the dispatcher's;
	// negative: none.
	Linger time.Duration
	// Batches bounds the received batches served at once; default 64.
	// Each may hold Parallelism workers for up to CreationTimeout; at the
	// bound Run receives no more, so jobs wait in the launch queue (where
	// another replica may take them), not in this process. A batch holds
	// its slot until its slowest machine registers (a minute, for a cold
	// start), so the bound must be wide enough for a whole burst: at 4,
	// a burst of 1,000 cold starts took three boot times instead of one.
	Batches int
	// Parallelism bounds jobs provisioned at once; default 64.
	Parallelism int
	// HeartbeatMaxAge: a reused instance whose last heartbeat is older
	// fails its post-claim check (about 15 s).
	HeartbeatMaxAge time.Duration
	// HeartbeatLag is how much older than the agent's last beat the store's
	// heartbeat may be (a store that writes beats at a resolution): it is
	// added to HeartbeatMaxAge.
	HeartbeatLag time.Duration
	// RegistrationTimeout: a reused instance must register for the job
	// within this (about 10 s).
	RegistrationTimeout time.Duration
	// CreationTimeout: a new instance must boot and register within this.
	CreationTimeout time.Duration // default 5 min
	// StopWait bounds how long, once Loop stops, the batches in hand still
	// wait for their machines to register; then the waits end as a
	// cancelled Serve's do (new machines terminated, claimed ones given
	// back, their jobs requeued). Set it below the process's shutdown
	// grace. Zero: they wait up to CreationTimeout.
	StopWait time.Duration
	// RequeueDelay: a resource-pool entry that does not fit goes back with
	// this delay (for example 3 s).
	RequeueDelay time.Duration
	// SeenLimit: the same instance seen this many times in one search
	// means the pool is locally exhausted (default 5).
	SeenLimit int
	// CreateBatch caps machines per fleet request; default 100.
	CreateBatch  int
	ControllerID string
	// AgentURL is where new machines' agents reach the control plane.
	AgentURL  string
	Deadlines domain.Deadlines
	// SpotAllowed, when set, says whether a runner class may launch spot
	// machines now (the spot circuit breaker).
	SpotAllowed func(runner string) bool
	// IDs draws new instances' ids (launch.Launcher.IDs).
	IDs func(prefix string) string
}

func (o *Options) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&o.Visibility, time.Minute)
	if o.Wait == 0 {
		o.Wait = time.Second
	}
	if o.Linger == 0 {
		o.Linger = 20 * time.Millisecond
	}
	set(&o.HeartbeatMaxAge, 15*time.Second)
	set(&o.RegistrationTimeout, 10*time.Second)
	set(&o.CreationTimeout, 5*time.Minute)
	set(&o.RequeueDelay, 3*time.Second)
	if o.BatchMax <= 0 {
		o.BatchMax = 100
	}
	if o.Batches <= 0 {
		o.Batches = 64
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

// Deps are the provisioner's collaborators. Notify may be nil; Log nil
// logs to slog's default.
type Deps struct {
	Store         Store
	Queue         domain.Queue
	Cloud         domain.Cloud
	GitHub        domain.GitHub
	Clock         domain.Clock
	Log           *slog.Logger
	Scope         func(j domain.Job) domain.Scope
	Notify        func(cloudID string)
	Registrations Registrations
	// ReuseAllowed says whether a job may run on an instance another job
	// ran on. A pool that does not reuse its instances promises its jobs a
	// fresh machine, even when they overflow. Nil allows every job.
	ReuseAllowed func(j domain.Job) bool
	// Reused says whether some pool that reuses its instances runs the
	// runner class: only those offer idle instances to its resource
	// pool, so for any other no search is made. Nil: any may.
	Reused func(runner string) bool
	// Hold keeps the launch messages in hand invisible until the returned
	// stop is called (keepalive.Hold), so the visibility timeout only says
	// how soon a message held by a process that died is taken again. Nil
	// holds nothing: a batch must then settle within the visibility.
	Hold func(queue string, receipts []string, visibility time.Duration) (stop func())
	// SpecHash returns a pool's current spec hash, "" while none is known
	// (as the dispatcher's). A reused instance of a pool launched with
	// another (before an image roll, a change of its runner) is retired
	// instead of serving. Nil knows none.
	SpecHash func(ctx context.Context, pool string) string
	// Respec returns the runner class and machine the configuration in
	// force gives a job, its labels routed again, and whether it gives one.
	// A job's spec is copied when it arrives, so without this a job that
	// waits, or comes back for another machine, keeps asking for what an
	// operator has since changed (a family out of capacity, an image
	// withdrawn). A job the configuration no longer serves keeps its own.
	// Nil: every job keeps the spec it arrived with.
	Respec func(j domain.Job) (runner string, spec domain.RunnerSpec, ok bool)
}

func (d Deps) missing() string {
	switch {
	case d.Store == nil:
		return "store"
	case d.Queue == nil:
		return "queue"
	case d.Cloud == nil:
		return "cloud"
	case d.GitHub == nil:
		return "github"
	case d.Clock == nil:
		return "clock"
	case d.Scope == nil:
		return "scope"
	case d.Registrations == nil:
		return "registrations"
	}
	return ""
}

// Provisioner serves the launch queue.
type Provisioner struct {
	Deps
	opts    Options
	metrics *metrics

	verbs    domain.Lifecycle
	tasks    clock.Tasks
	pipeline *serving.Pipeline
	launcher *launch.Launcher
	awaiting awaiting

	mu      sync.Mutex
	pickups map[string]*pickup
}

// New returns a provisioner; reg may be nil.
func New(d Deps, reg prometheus.Registerer, opts Options) (*Provisioner, error) {
	if opts.ControllerID == "" {
		return nil, errors.New("provision: a controller id is required to tag machines")
	}
	if m := d.missing(); m != "" {
		return nil, fmt.Errorf("provision: no %s given", m)
	}
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
	if d.Log == nil {
		d.Log = slog.Default()
	}
	verbs := domain.NewLifecycle(opts.Deadlines)
	return &Provisioner{Deps: d, opts: opts, metrics: m, pickups: map[string]*pickup{},
		verbs: verbs, tasks: clock.TasksOf(d.Clock), pipeline: &serving.Pipeline{Store: d.Store, GitHub: d.GitHub, Clock: d.Clock, Log: d.Log,
			Verbs: verbs, Scope: d.Scope, Notify: d.Notify},
		launcher: &launch.Launcher{Store: d.Store, Cloud: d.Cloud, Clock: d.Clock, Verbs: verbs,
			ControllerID: opts.ControllerID, AgentURL: opts.AgentURL, SpotAllowed: opts.SpotAllowed, IDs: opts.IDs}}, nil
}

func (p *Provisioner) pickupFor(class string) *pickup {
	p.mu.Lock()
	defer p.mu.Unlock()
	pm, ok := p.pickups[class]
	if !ok {
		pm = &pickup{queue: p.Queue, store: p.Store, clock: p.Clock, class: class, requeueDelay: p.opts.RequeueDelay, seenLimit: p.opts.SeenLimit}
		if p.opts.Wait >= 0 {
			pm.longPoll = time.Second
		}
		p.pickups[class] = pm
	}
	return pm
}

// idlePoll is how long Run waits after an empty receive when it does not
// long-poll (Options.Wait negative), so that it never spins.
const idlePoll = time.Second

// Loop serves the launch queue, at most Options.Batches received batches at
// once: a step waits for a free slot, receives a batch and provisions it in
// the background. When the loop ends, the batches in hand are provisioned to
// the end, or until Options.StopWait has passed.
func (p *Provisioner) Loop() loop.Loop {
	var wg sync.WaitGroup
	slots := make(chan struct{}, p.opts.Batches)
	cut := make(chan struct{})
	return loop.Loop{Name: "provision", Step: func(ctx context.Context) error {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		msgs, err := p.receive(ctx)
		if len(msgs) == 0 {
			<-slots
			return err
		}
		// The batch is read here, not in the background, so that a store
		// that cannot read it fails the step: the loop counts it and
		// backs off.
		bctx := context.WithoutCancel(ctx)
		b, err := p.read(bctx, msgs)
		if err != nil {
			<-slots
			return err
		}
		wg.Go(func() {
			defer func() { <-slots }()
			p.provision(bctx, cut, b)
		})
		return nil
	}, Final: func(context.Context) error { p.finish(len(slots), &wg, cut); return nil }}
}

// receive takes the next batch from the launch queue, lingering while a
// burst keeps arriving. After an empty receive without a long poll, it
// pauses so that the loop never spins.
func (p *Provisioner) receive(ctx context.Context) ([]domain.Message, error) {
	msgs, err := jobs.ReceiveBatch(ctx, p.Queue, p.Clock, domain.QueueLaunch, jobs.BatchOptions{
		Max: p.opts.BatchMax, Visibility: p.opts.Visibility, Wait: p.opts.Wait, Linger: p.opts.Linger})
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("receive from the launch queue: %w", err)
	}
	if len(msgs) == 0 && p.opts.Wait < 0 {
		clock.Sleep(p.tasks, p.Clock, ctx.Done(), idlePoll)
	}
	return msgs, nil
}

// request is one job being provisioned.
type request struct {
	msg domain.Message
	job domain.Job
	// runner and spec are the class and machine the job is served with:
	// the configuration's when its message was read (Deps.Respec), else
	// the job's own. The job is read again as it changes; these stay, and
	// are written on it by its launch mark or its handover (recorded).
	runner string
	spec   domain.RunnerSpec
	// attempts is the job's Attempts when its message was read: a change
	// means someone else sent the job back to its queue since.
	attempts int
	// mark is the instance this request launches for its job, once the
	// job is marked with it (mark.go).
	mark string
	// tried is the instance last tried for the job, for the log.
	tried string
	inst  domain.Instance // the instance serving it, once found
	// h is the handover of the instance being tried, with the runner
	// registered for it until the job has it for good or it is deleted.
	h *serving.Handover
	// outcome: "reuse", "cold", or "" (not served: requeue).
	outcome domain.Via
	err     error
}

// attempt starts the handover of instance in to the request's job.
func (rq *request) attempt(in domain.Instance, via domain.Via) *serving.Handover {
	rq.h = &serving.Handover{Job: rq.job, Inst: in, Via: via, Runner: rq.runner, Spec: rq.spec}
	rq.tried = in.ID
	return rq.h
}

// recorded returns t, a guarded write of the request's job on its way to
// a machine, writing on the job too the runner class and machine it is
// served with: the spot re-run decision, the API and the dashboard read
// the job's row, and must see the runner it runs on, retry setting
// included, not the one it arrived with.
func (rq *request) recorded(t domain.JobTransitionRequest) domain.JobTransitionRequest {
	apply, runner, spec := t.Apply, rq.runner, rq.spec
	t.Apply = func(j *domain.Job) {
		apply(j)
		j.Runner, j.Spec = runner, spec
	}
	return t
}

// errGone: the job no longer waits for a runner (cancelled, or served
// elsewhere), so provisioning for it stops.
var errGone = errors.New("job no longer waits for a runner")

// errStopped: the caller gave up (Serve's context ended).
var errStopped = errors.New("provisioning stopped")

// Serve provisions one received batch and settles every message. When ctx
// ends, waits are cut short and whatever was held for unserved jobs is
// given back; the messages are settled all the same. When the batch's jobs
// cannot be read, it provisions nothing and returns the error: the
// messages stay in flight and come back after the visibility timeout.
func (p *Provisioner) Serve(ctx context.Context, msgs []domain.Message) error {
	quit := ctx.Done()
	ctx = context.WithoutCancel(ctx)
	b, err := p.read(ctx, msgs)
	if err != nil {
		return err
	}
	p.provision(ctx, quit, b)
	return nil
}

// received is a received batch sorted out: the requests of the jobs that
// wait for a runner, by class; those of jobs another provisioner launches
// a machine for; and the receipts of the messages done with.
type received struct {
	byClass  map[string][]*request
	deferred []*request // rq.err is their *launchedElsewhere
	done     []string
}

// read reads the jobs of a received batch. A message that is unreadable, or
// whose job no longer waits for a runner, is done with and counted dropped.
func (p *Provisioner) read(ctx context.Context, msgs []domain.Message) (received, error) {
	got, done, err := jobs.ReadMessages(ctx, p.Store, p.Log, domain.QueueLaunch, msgs, waiting)
	if err != nil {
		return received{}, err
	}
	b := received{byClass: map[string][]*request{}, done: done}
	for _, r := range got {
		rq := &request{msg: r.Msg, job: r.Job, attempts: r.Job.Attempts}
		rq.runner, rq.spec = p.respec(r.Job)
		le, err := p.launchUnderWay(ctx, r.Job, "")
		if err != nil {
			return received{}, err
		}
		if le != nil {
			rq.err = le
			b.deferred = append(b.deferred, rq)
			continue
		}
		b.byClass[rq.runner] = append(b.byClass[rq.runner], rq)
	}
	p.metrics.jobs.WithLabelValues(outcomeDropped).Add(float64(len(b.done)))
	return b, nil
}

// respec returns the runner class and machine to serve j with: the
// configuration's in force (Deps.Respec), else its own. A change is said
// when the job's row differs from them; once the job's launch mark or
// handover has written them on it, it no longer does, so each change is
// said once, not at each of the job's messages.
func (p *Provisioner) respec(j domain.Job) (string, domain.RunnerSpec) {
	if p.Respec == nil {
		return j.Runner, j.Spec
	}
	runner, spec, ok := p.Respec(j)
	if !ok {
		return j.Runner, j.Spec
	}
	if runner != j.Runner || !sameSpec(spec, j.Spec) {
		p.Log.Info("a job is launched with its runner as now configured, changed since it arrived",
			"job", j.ID, "runner", runner, "arrived_with", j.Runner,
			"retry", spec.Retry, "arrived_with_retry", j.Spec.Retry)
	}
	return runner, spec
}

// sameSpec reports whether two runner specs ask for the same machine and
// the same re-run of an interrupted job: domain.SpecHash leaves the retry
// setting out, as it makes no other machine.
func sameSpec(a, b domain.RunnerSpec) bool {
	return a.Retry == b.Retry && domain.SpecHash(a, "", domain.Pool{}) == domain.SpecHash(b, "", domain.Pool{})
}

// provision serves a batch's requests, each class in parallel, and settles
// every message; quit cuts waits short.
func (p *Provisioner) provision(ctx context.Context, quit <-chan struct{}, b received) {
	if err := p.Queue.Delete(ctx, domain.QueueLaunch, b.done); err != nil {
		p.Log.Warn("delete settled launch messages", "err", err)
	}
	p.settle(ctx, b.deferred)
	// A job waits here through its machine's boot: its message is kept
	// invisible meanwhile, so the visibility timeout only says how soon a
	// message held by a process that died is taken again.
	var held []string
	for _, reqs := range b.byClass {
		for _, rq := range reqs {
			held = append(held, rq.msg.Receipt)
		}
	}
	if p.Hold != nil {
		defer p.Hold(domain.QueueLaunch, held, p.opts.Visibility)()
	}
	imgs := newImages(p.Cloud)
	classes := slices.Sorted(maps.Keys(b.byClass))
	clock.Each(p.tasks, len(classes), len(classes), func(i int) {
		p.serveClass(ctx, newLedger(quit, imgs), classes[i], b.byClass[classes[i]])
	})
}

// serveClass provisions one class's requests, dumps what it holds if
// anything panicked, and settles every request.
func (p *Provisioner) serveClass(ctx context.Context, led *ledger, class string, reqs []*request) {
	led.guard(func() { p.provisionClass(ctx, class, reqs, led) })
	if led.failure() != nil {
		p.dump(ctx, class, led, reqs)
	}
	if led.stopped() {
		for _, rq := range reqs {
			if rq.outcome == "" && rq.err == nil {
				rq.err = errStopped // left before its turn came
			}
		}
	}
	p.settle(ctx, reqs)
}
