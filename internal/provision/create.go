package provision

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/serving"
)

// create is seed 001's creation: one fleet request for the requests the
// resource pool could not serve (split at CreateBatch, or at what the last
// partially fulfilled fleet of this class got). Rows are written before the
// call, bound to their jobs; a partially fulfilled fleet is terminated whole
// so nothing is orphaned; each new instance must register for its job
// within CreationTimeout.
func (p *Provisioner) create(ctx context.Context, class string, reqs []*request, led *ledger) {
	var want []*request
	for _, rq := range reqs {
		if !p.gone(ctx, rq) { // cancelled meanwhile: no machine for it
			want = append(want, rq)
		}
	}
	for len(want) > 0 && !led.stopped() && led.failure() == nil {
		k := min(len(want), p.fleetSize(class))
		batch := want[:k]
		want = want[k:]
		insts, err := p.launch(ctx, class, batch, led)
		if err != nil {
			for _, rq := range batch {
				rq.err = err
			}
			continue
		}
		errs := p.assignMany(ctx, batch, insts)
		var wg sync.WaitGroup
		for i, rq := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				led.guard(func() { p.validate(ctx, rq, insts[i], errs[i], led) })
			}()
		}
		wg.Wait()
	}
}

func (p *Provisioner) fleetSize(class string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.fleetCap[class]; ok && c > 0 {
		return min(c, p.opts.CreateBatch)
	}
	return p.opts.CreateBatch
}

// noteFulfilled caps the class's next fleets at what came when the cloud
// ran short of capacity, and lifts the cap once a fleet is fulfilled. Other
// failures (throttling, a bad request) say nothing about capacity.
func (p *Provisioner) noteFulfilled(class string, got, asked int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err == nil && got >= asked:
		delete(p.fleetCap, class)
	case got < asked && (err == nil || errors.Is(err, domain.ErrInsufficientCapacity)):
		p.fleetCap[class] = max(got, 1)
	}
}

// launch writes one pending row per request and makes one fleet request.
// It returns the booting instances in request order, or an error after
// cleaning up everything it made. Every row is in the ledger from the
// moment it is written, so a panic on the way still closes it.
func (p *Provisioner) launch(ctx context.Context, class string, reqs []*request, led *ledger) ([]domain.Instance, error) {
	spec := reqs[0].job.Spec
	imageID, err := led.images.resolve(ctx, spec.Image)
	if err != nil {
		return nil, rejectable(fmt.Errorf("resolve image %q: %w", spec.Image, err),
			class, fmt.Sprintf("image %q of runner %s does not resolve", spec.Image, class))
	}
	launch, secret := domain.NewID("lt"), domain.NewSecret()
	rows, err := p.recordRows(ctx, class, spec, imageID, launch, domain.HashSecret(secret), reqs, led)
	if err != nil {
		return nil, err
	}
	machines, err := p.Cloud.Create(ctx, domain.LaunchSpec{
		Runner: spec, ImageID: imageID, Count: len(rows), ClientToken: launch,
		Agent: domain.AgentBootstrap{URL: p.opts.AgentURL, LaunchID: launch, Secret: secret},
		Tags: map[string]string{
			domain.TagController: p.opts.ControllerID, domain.TagRole: string(domain.RoleOnDemand),
			domain.TagRunner: class, domain.TagLaunch: launch, domain.TagStatus: "detached",
		},
	})
	p.noteFulfilled(class, len(machines), len(rows), err)
	if err != nil || len(machines) != len(rows) {
		p.metrics.fleets.WithLabelValues("failed").Inc()
		if err == nil {
			err = fmt.Errorf("fleet returned %d of %d machines", len(machines), len(rows))
		}
		p.abandon(ctx, rows, machines, err, led)
		return nil, rejectable(fmt.Errorf("create %d %s instances: %w", len(rows), class, err),
			class, fmt.Sprintf("image %q (%s) of runner %s is unknown to the cloud", spec.Image, imageID, class))
	}
	p.metrics.fleets.WithLabelValues("fulfilled").Inc()
	out, err := p.boot(ctx, rows, machines)
	if err != nil {
		p.abandon(ctx, rows, machines, err, led)
		return nil, fmt.Errorf("record created instances: %w", err)
	}
	for i, in := range out {
		led.hold(holding{inst: in, rq: reqs[i], created: true})
	}
	return out, nil
}

// recordRows writes the pending rows of one fleet request, bound to their
// jobs, before the cloud is called.
func (p *Provisioner) recordRows(ctx context.Context, class string, spec domain.RunnerSpec, imageID, launch, bootstrapHash string, reqs []*request, led *ledger) ([]domain.Instance, error) {
	now := p.Clock.Now()
	rows := make([]domain.Instance, len(reqs))
	for i, rq := range reqs {
		rows[i] = domain.Instance{
			ID: domain.NewID("bp"), Pool: rq.job.Pool, Role: domain.RoleOnDemand, Runner: class,
			SpecHash: domain.SpecHash(spec, imageID, domain.Pool{}), LaunchID: launch,
			State: domain.StatePending, Job: rq.job.Key(), Deadline: p.opts.Deadlines.Until(domain.StatePending, now),
			CPU: spec.CPU.Min, MemoryMiB: spec.RAM.Min * 1024, BootstrapHash: bootstrapHash,
		}
	}
	if err := p.Store.CreateInstances(ctx, rows); err != nil {
		return nil, fmt.Errorf("record %d new instances: %w", len(rows), err)
	}
	for i, rq := range reqs {
		led.hold(holding{inst: rows[i], rq: rq, created: true})
	}
	return rows, nil
}

// boot records the machines' cloud ids: the rows move to booting.
func (p *Provisioner) boot(ctx context.Context, rows []domain.Instance, machines []domain.CloudInstance) ([]domain.Instance, error) {
	now := p.Clock.Now()
	reqs := make([]domain.TransitionRequest, len(rows))
	for i := range rows {
		m := machines[i]
		reqs[i] = domain.TransitionRequest{ID: rows[i].ID, Guard: domain.GuardOf(withVersion(rows[i])), Apply: func(x *domain.Instance) {
			x.State, x.CloudID, x.RunningSince = domain.StateBooting, m.ID, now
			x.InstanceType, x.UsageClass = m.InstanceType, m.UsageClass
			x.Deadline = p.opts.Deadlines.Until(domain.StateBooting, now)
		}}
	}
	results, err := p.Store.TransitionBatch(ctx, reqs)
	if err != nil {
		return nil, err
	}
	out := make([]domain.Instance, len(rows))
	for i, r := range results {
		if r.Err != nil {
			return nil, r.Err
		}
		out[i] = r.Instance
	}
	return out, nil
}

// withVersion is a new row as the store stamps it (version 1).
func withVersion(in domain.Instance) domain.Instance {
	in.Version = 1
	return in
}

// abandon terminates every machine of a failed fleet and closes its rows:
// a row that never got a cloud id is closed at once, one that did is left
// terminating for the terminator to confirm. Machines whose terminate call
// fails carry the launch tag; the reaper finds them.
func (p *Provisioner) abandon(ctx context.Context, rows []domain.Instance, machines []domain.CloudInstance, cause error, led *ledger) {
	var ids []string
	for _, m := range machines {
		ids = append(ids, m.ID)
	}
	for _, batch := range domain.Chunk(ids, domain.MaxBatch) {
		if err := p.Cloud.Terminate(ctx, batch); err != nil {
			p.Log.Warn("terminate failed fleet", "count", len(batch), "err", err)
		}
	}
	now := p.Clock.Now()
	for _, r := range rows {
		led.release(r.ID)
		cur, err := p.Store.GetInstance(ctx, r.ID)
		if err != nil || cur.State == domain.StateTerminating || cur.State == domain.StateTerminated {
			continue
		}
		closed, err := p.Store.Transition(ctx, cur.ID, domain.GuardOf(cur), func(x *domain.Instance) {
			x.State, x.Reason = domain.StateTerminating, cause.Error()
			x.Deadline = p.opts.Deadlines.Until(domain.StateTerminating, now)
		})
		if err == nil && closed.CloudID == "" {
			_, err = p.Store.Transition(ctx, closed.ID, domain.GuardOf(closed), func(x *domain.Instance) {
				x.State, x.Deadline = domain.StateTerminated, time.Time{}
			})
		}
		if err != nil {
			p.Log.Warn("close row of failed fleet", "instance", r.ID, "err", err)
		}
	}
}

// validate waits for a new instance to register for its job; on failure
// the instance is terminated and the job unbound, to be requeued.
func (p *Provisioner) validate(ctx context.Context, rq *request, in domain.Instance, assignErr error, led *ledger) {
	err := assignErr
	if err == nil {
		err = p.awaitRegistration(ctx, rq.job, in.ID, p.opts.CreationTimeout, led.quit, p.Registrations.Wait(in.ID))
		p.Registrations.Forget(in.ID)
	}
	if err == nil {
		rq.h.Done() // the runner is the job's now
		rq.outcome, rq.inst = domain.ViaCold, in
		led.release(in.ID)
		return
	}
	rq.err = err
	p.rollBack(ctx, rq, in, serving.Undo{Terminate: err.Error()}, err.Error())
	led.release(in.ID)
	if !errors.Is(err, errNotRegistered) {
		p.Log.Warn("new instance not handed to its job", "instance", in.ID, "job", rq.job.ID, "err", err)
	}
}

// assignMany hands every new instance to its job through the serving
// pipeline: a fleet's assignments cost one store batch, not one write per
// instance. It returns each request's error.
func (p *Provisioner) assignMany(ctx context.Context, reqs []*request, insts []domain.Instance) []error {
	hs := make([]*serving.Handover, len(reqs))
	for i, rq := range reqs {
		hs[i] = rq.attempt(insts[i], domain.ViaCold)
	}
	p.pipeline.HandOver(ctx, hs)
	errs := make([]error, len(reqs))
	for i, h := range hs {
		reqs[i].job, errs[i] = h.Job, h.Err
	}
	return errs
}
