package provision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launch"
	"github.com/bullpen-ci/bullpen/internal/serving"
)

// fleetsAtOnce bounds the fleets of one class and batch launched at once
// (more than one only when the batch outgrows CreateBatch).
const fleetsAtOnce = 8

// create is the creation step: one fleet request for the requests the
// resource pool could not serve, per version of the class's spec (jobs
// recorded on both sides of a configuration change ask for different
// machines), split at CreateBatch, the fleets launched at once, so that
// none waits for another's machines to boot. Each job is marked with its
// instance (mark.go) and its runner registered before the call, and rows
// are written before it, bound to their jobs. A fleet is a batch of
// independent jobs: when the cloud fills part of it, the jobs it filled
// are served and the others requeued. Each new instance must register for
// its job within CreationTimeout.
func (p *Provisioner) create(ctx context.Context, class string, reqs []*request, led *ledger) {
	// Marked before anything is made for it: a job cancelled meanwhile,
	// or launched for by another provisioner, gets no runner and no
	// machine.
	want := p.register(ctx, p.mark(ctx, reqs))
	defer p.discardUnlaunched(ctx, want)
	fleets := p.fleets(want)
	clock.Each(p.tasks, len(fleets), fleetsAtOnce, func(i int) {
		led.guard(func() {
			if led.stopped() || led.failure() != nil {
				return
			}
			got, insts := p.launch(ctx, class, fleets[i], led)
			for _, rq := range fleets[i] {
				if rq.err != nil {
					p.pipeline.Discard(ctx, rq.h)
				}
			}
			if len(got) > 0 {
				p.handOverNew(ctx, got, insts, led)
			}
		})
	})
}

// fleets splits requests into fleets: one per version of their spec, in
// the order each version first comes, each split at CreateBatch.
func (p *Provisioner) fleets(reqs []*request) [][]*request {
	var order []string
	bySpec := map[string][]*request{}
	for _, rq := range reqs {
		k := domain.SpecHash(rq.spec, "", domain.Pool{})
		if _, ok := bySpec[k]; !ok {
			order = append(order, k)
		}
		bySpec[k] = append(bySpec[k], rq)
	}
	var out [][]*request
	for _, k := range order {
		out = append(out, domain.Chunk(bySpec[k], p.opts.CreateBatch)...)
	}
	return out
}

// register registers each request's runner, named for the instance its
// job is marked with, before that instance is launched: a runner GitHub
// refuses (credentials, permissions, a runner group or labels it will not
// take), cannot register now (an outage) or will not register yet (its
// rate limit) costs no machine, and the job is retried without one, a
// rate-limited one once the limit lifts (requeue). Nothing waits here:
// the other requests' runners are registered already, and their machines
// are launched at once. It returns the requests whose runner is
// registered.
func (p *Provisioner) register(ctx context.Context, reqs []*request) []*request {
	hs := make([]*serving.Handover, len(reqs))
	for i, rq := range reqs {
		hs[i] = rq.attempt(domain.Instance{ID: rq.mark, Runner: rq.runner}, domain.ViaCold)
	}
	p.pipeline.Register(ctx, hs)
	var ok []*request
	for _, rq := range reqs {
		if rq.h.Err != nil {
			rq.err = rq.h.Err
			continue
		}
		ok = append(ok, rq)
	}
	return ok
}

// discardUnlaunched deletes the runners registered for requests whose
// machine was never launched (provisioning stopped, or panicked, first).
func (p *Provisioner) discardUnlaunched(ctx context.Context, reqs []*request) {
	for _, rq := range reqs {
		if rq.outcome == "" && rq.h != nil && rq.h.Inst.ID == rq.mark && rq.h.Inst.CloudID == "" {
			p.pipeline.Discard(ctx, rq.h)
		}
	}
}

// handOverNew hands new instances to their jobs and waits for each to
// register.
func (p *Provisioner) handOverNew(ctx context.Context, reqs []*request, insts []domain.Instance, led *ledger) {
	// Noted before the handovers wake the agents: from then on, a loop
	// that stops says it waits for these machines.
	deadline := p.Clock.Now().Add(p.opts.CreationTimeout)
	ends := make([]func(), len(insts))
	for i, in := range insts {
		ends[i] = p.awaiting.add(in.ID, true, deadline)
	}
	defer func() {
		for _, end := range ends {
			end()
		}
	}()
	errs := p.assignMany(ctx, reqs, insts)
	clock.Each(p.tasks, len(reqs), len(reqs), func(i int) {
		led.guard(func() {
			defer ends[i]()
			p.validate(ctx, reqs[i], insts[i], errs[i], led)
		})
	})
}

// launch writes one pending row per request, bound to its job, and makes
// one fleet request. It returns the requests the cloud filled, with their
// booting instances in the same order; the others get their error. A
// fleet the cloud filled in part (short of capacity) keeps what came: its
// rows the cloud did not fill are closed (the launcher's). One that failed
// otherwise is cleaned up whole. Every row is in the ledger from the
// moment it is written, so a panic on the way still closes it.
func (p *Provisioner) launch(ctx context.Context, class string, reqs []*request, led *ledger) ([]*request, []domain.Instance) {
	fail := func(err error) ([]*request, []domain.Instance) {
		for _, rq := range reqs {
			rq.err = err
		}
		return nil, nil
	}
	spec := reqs[0].spec // a fleet's jobs share their spec (fleets)
	imageID, err := led.images.resolve(ctx, spec)
	if err != nil {
		return fail(rejectable(fmt.Errorf("resolve image %q: %w", spec.Image, err),
			class, fmt.Sprintf("image %q of runner %s does not resolve", spec.Image, class)))
	}
	rows := make([]domain.Instance, len(reqs))
	for i, rq := range reqs {
		rows[i] = domain.Instance{
			ID: rq.mark, Pool: rq.job.Pool, Role: domain.RoleOnDemand, Runner: class,
			SpecHash: domain.SpecHash(spec, imageID, domain.Pool{Name: rq.job.Pool}), Job: rq.job.Key(),
			CPU: spec.CPU.Min, MemoryMiB: spec.RAM.Min * 1024,
		}
	}
	res, err := p.launcher.Launch(ctx, launch.Fleet{Rows: rows, Spec: spec, Image: imageID,
		Tags: map[string]string{domain.TagRole: string(domain.RoleOnDemand), domain.TagRunner: class, domain.TagStatus: "detached"},
		Recorded: func(rows []domain.Instance) {
			for i, rq := range reqs {
				led.hold(holding{inst: rows[i], rq: rq, created: true})
			}
		}})
	if err == nil && len(res.Booted) < len(rows) {
		err = fmt.Errorf("the cloud returned %d of %d machines", len(res.Booted), len(rows))
	}
	if len(res.Booted) == 0 || (err != nil && !errors.Is(err, domain.ErrInsufficientCapacity)) {
		p.metrics.fleets.WithLabelValues("failed", fleetCause(err)).Inc()
		p.abandon(ctx, rows, res.Booted, err, led)
		return fail(rejectable(fmt.Errorf("create %d %s instances: %w", len(rows), class, err),
			class, fmt.Sprintf("image %q (%s) of runner %s is unknown to the cloud", spec.Image, imageID, class)))
	}
	for _, in := range res.Closed {
		led.release(in.ID)
	}
	byID := make(map[string]*request, len(reqs))
	for _, rq := range reqs {
		byID[rq.mark] = rq
	}
	got := make([]*request, 0, len(res.Booted))
	for _, in := range res.Booted {
		rq := byID[in.ID]
		delete(byID, in.ID)
		led.hold(holding{inst: in, rq: rq, created: true})
		got = append(got, rq)
	}
	if len(byID) == 0 {
		p.metrics.fleets.WithLabelValues("fulfilled", "").Inc()
		return got, res.Booted
	}
	p.metrics.fleets.WithLabelValues("partial", fleetCause(err)).Inc()
	short := fmt.Errorf("create %d %s instances: %w", len(rows), class, err)
	for _, rq := range byID {
		rq.err = short
		led.release(rq.mark)
	}
	if len(res.Booted)+len(res.Closed) < len(rows) {
		// Rows whose machine could not be recorded: the launcher
		// terminated the machines; their rows are closed here.
		for _, c := range p.pendingLeft(ctx, rows, res.Booted, err, p.Clock.Now()) {
			if _, err := p.Store.Transition(ctx, c.ID, c.Guard, c.Apply); err != nil {
				p.Log.Warn("close row of a fleet filled in part", "instance", c.ID, "err", err)
			}
		}
	}
	p.Log.Info("fleet filled in part; serving the jobs it filled, requeuing the others",
		"runner", class, "asked", len(rows), "got", len(res.Booted), "err", err)
	return got, res.Booted
}

// fleetCause says, in a bounded set of words, why the cloud did not fill
// a fleet.
func fleetCause(err error) string {
	switch {
	case errors.Is(err, domain.ErrInsufficientCapacity):
		return "capacity"
	case errors.Is(err, domain.ErrThrottled):
		return "throttled"
	case errors.Is(err, domain.ErrInvalidRequest), errors.Is(err, domain.ErrUnknownImage):
		return "invalid"
	}
	return "other"
}

// abandon terminates the machines of a failed fleet and closes their rows
// (the launcher closed those it could not fill). A row whose terminate call
// failed is left terminating, for the terminator to retry; its machine
// carries the launch tag, so the reaper finds it too.
func (p *Provisioner) abandon(ctx context.Context, rows, booted []domain.Instance, cause error, led *ledger) {
	for _, r := range rows {
		led.release(r.ID)
	}
	now := p.Clock.Now()
	var done []domain.TransitionRequest
	for _, batch := range domain.Chunk(booted, domain.MaxBatch) {
		reqs := make([]domain.TransitionRequest, len(batch))
		ids := make([]string, len(batch))
		for i, in := range batch {
			ids[i], reqs[i] = in.CloudID, p.verbs.Terminate(in, cause.Error(), now)
		}
		terminated := p.Cloud.Terminate(ctx, ids)
		if terminated != nil {
			p.Log.Warn("terminate failed fleet", "count", len(batch), "err", terminated)
		}
		res, err := p.Store.TransitionBatch(ctx, reqs)
		if err != nil {
			p.Log.Warn("close rows of failed fleet", "count", len(reqs), "err", err)
			continue
		}
		for i, r := range res {
			switch {
			case r.Err != nil:
				p.Log.Warn("close row of failed fleet", "instance", reqs[i].ID, "err", r.Err)
			case terminated == nil:
				done = append(done, p.verbs.Close(r.Instance))
			}
		}
	}
	done = append(done, p.pendingLeft(ctx, rows, booted, cause, now)...)
	for _, c := range done {
		if _, err := p.Store.Transition(ctx, c.ID, c.Guard, c.Apply); err != nil {
			p.Log.Warn("close row of failed fleet", "instance", c.ID, "err", err)
		}
	}
}

// pendingLeft marks terminating the rows of a failed fleet still pending (a
// machine whose record failed: the launcher terminated it) and returns the
// closes that follow.
func (p *Provisioner) pendingLeft(ctx context.Context, rows, booted []domain.Instance, cause error, now time.Time) []domain.TransitionRequest {
	launched := make(map[string]bool, len(booted))
	for _, in := range booted {
		launched[in.ID] = true
	}
	var out []domain.TransitionRequest
	for _, r := range rows {
		if launched[r.ID] {
			continue
		}
		cur, err := p.Store.GetInstance(ctx, r.ID)
		if err != nil || cur.State != domain.StatePending {
			continue
		}
		t := p.verbs.Terminate(cur, cause.Error(), now)
		marked, err := p.Store.Transition(ctx, t.ID, t.Guard, t.Apply)
		if err != nil {
			p.Log.Warn("close row of failed fleet", "instance", r.ID, "err", err)
			continue
		}
		out = append(out, p.verbs.Close(marked))
	}
	return out
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
	if errors.Is(err, errNotRegistered) && !p.jobLeft(ctx, rq, in) {
		p.metrics.unregistered.Inc()
	}
	p.rollBack(ctx, rq, in, serving.Undo{Terminate: err.Error()}, err.Error())
	led.release(in.ID)
	switch {
	case errors.Is(err, errStopped):
		// Provisioning was told to stop: not a fault, and the loop says so once.
		p.Log.Debug("new instance not handed to its job", "instance", in.ID, "job", rq.job.ID, "err", err)
	case !errors.Is(err, errNotRegistered):
		p.Log.Warn("new instance not handed to its job", "instance", in.ID, "job", rq.job.ID, "err", err)
	}
}

// assignMany hands every new instance to its job, with the runner
// registered for it before the launch, through the serving pipeline: a
// fleet's assignments cost one store batch, not one write per instance.
// It returns each request's error.
func (p *Provisioner) assignMany(ctx context.Context, reqs []*request, insts []domain.Instance) []error {
	hs := make([]*serving.Handover, len(reqs))
	for i, rq := range reqs {
		rq.h.Inst, rq.h.Job = insts[i], rq.job
		hs[i] = rq.h
	}
	p.pipeline.HandOver(ctx, hs)
	errs := make([]error, len(reqs))
	for i, h := range hs {
		reqs[i].job, errs[i] = h.Job, h.Err
	}
	return errs
}
