package provision

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// create is seed 001's creation: one fleet request for the requests the
// resource pool could not serve (split at CreateBatch, or at what the last
// partially fulfilled fleet of this class got). Rows are written before the
// call, bound to their jobs; a partially fulfilled fleet is terminated whole
// so nothing is orphaned; each new instance must register for its job
// within CreationTimeout.
func (p *Provisioner) create(ctx context.Context, class string, reqs []*request, led *ledger) {
	for len(reqs) > 0 {
		k := min(len(reqs), p.fleetSize(class))
		batch := reqs[:k]
		reqs = reqs[k:]
		insts, err := p.launch(ctx, class, batch)
		if err != nil {
			for _, rq := range batch {
				rq.err = err
			}
			continue
		}
		var wg sync.WaitGroup
		for i, rq := range batch {
			led.add(&led.created, insts[i])
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.validate(ctx, rq, insts[i], led)
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

func (p *Provisioner) noteFulfilled(class string, got, asked int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if got < asked {
		p.fleetCap[class] = max(got, 1)
	} else {
		delete(p.fleetCap, class)
	}
}

// launch writes one pending row per request and makes one fleet request.
// It returns the booting instances in request order, or an error after
// cleaning up everything it made.
func (p *Provisioner) launch(ctx context.Context, class string, reqs []*request) ([]domain.Instance, error) {
	spec := reqs[0].job.Spec
	imageID, err := p.image(ctx, spec.Image)
	if err != nil {
		return nil, fmt.Errorf("resolve image %q: %w", spec.Image, err)
	}
	now := p.Clock.Now()
	launch := domain.NewID("lt")
	rows := make([]domain.Instance, len(reqs))
	for i, rq := range reqs {
		rows[i] = domain.Instance{
			ID: domain.NewID("bp"), Pool: rq.job.Pool, Role: domain.RoleOnDemand, Runner: class,
			SpecHash: domain.SpecHash(spec, imageID, domain.Pool{}), LaunchID: launch,
			State: domain.StatePending, Job: rq.job.Key(), Deadline: p.opts.Deadlines.Until(domain.StatePending, now),
			CPU: spec.CPU.Min, MemoryMiB: spec.RAM.Min * 1024,
		}
	}
	if err := p.Store.CreateInstances(ctx, rows); err != nil {
		return nil, fmt.Errorf("record %d new instances: %w", len(rows), err)
	}
	machines, err := p.Cloud.Create(ctx, domain.LaunchSpec{
		Runner: spec, ImageID: imageID, Count: len(rows), ClientToken: launch,
		Tags: map[string]string{
			domain.TagController: p.opts.ControllerID, domain.TagRole: string(domain.RoleOnDemand),
			domain.TagRunner: class, domain.TagLaunch: launch, domain.TagStatus: "detached",
		},
	})
	p.noteFulfilled(class, len(machines), len(rows))
	if err != nil || len(machines) != len(rows) {
		p.metrics.fleets.WithLabelValues("failed").Inc()
		if err == nil {
			err = fmt.Errorf("fleet returned %d of %d machines", len(machines), len(rows))
		}
		p.abandon(ctx, rows, machines, err)
		return nil, fmt.Errorf("create %d %s instances: %w", len(rows), class, err)
	}
	p.metrics.fleets.WithLabelValues("fulfilled").Inc()
	reqsT := make([]domain.TransitionRequest, len(rows))
	for i := range rows {
		m := machines[i]
		reqsT[i] = domain.TransitionRequest{ID: rows[i].ID, Guard: domain.GuardOf(withVersion(rows[i])), Apply: func(x *domain.Instance) {
			x.State, x.CloudID, x.RunningSince = domain.StateBooting, m.ID, now
			x.InstanceType, x.UsageClass = m.InstanceType, m.UsageClass
			x.Deadline = p.opts.Deadlines.Until(domain.StateBooting, now)
		}}
	}
	results, err := p.Store.TransitionBatch(ctx, reqsT)
	out := make([]domain.Instance, len(rows))
	for i, r := range results {
		if err == nil && r.Err != nil {
			err = r.Err
		}
		out[i] = r.Instance
	}
	if err != nil {
		p.abandon(ctx, rows, machines, err)
		return nil, fmt.Errorf("record created instances: %w", err)
	}
	return out, nil
}

// withVersion is a new row as the store stamps it (version 1).
func withVersion(in domain.Instance) domain.Instance {
	in.Version = 1
	return in
}

// abandon terminates every machine of a failed fleet and closes its rows
// (which never got a cloud id). Machines whose terminate call fails carry
// the launch tag; the reaper finds them.
func (p *Provisioner) abandon(ctx context.Context, rows []domain.Instance, machines []domain.CloudInstance, cause error) {
	var ids []string
	for _, m := range machines {
		ids = append(ids, m.ID)
	}
	for _, batch := range domain.Chunk(ids, domain.MaxBatch) {
		if err := p.Cloud.Terminate(ctx, batch); err != nil {
			p.Log.Warn("terminate failed fleet", "count", len(batch), "err", err)
		}
	}
	for _, r := range rows {
		cur, err := p.Store.GetInstance(ctx, r.ID)
		if err != nil || cur.CloudID != "" {
			continue
		}
		closed, err := p.Store.Transition(ctx, cur.ID, domain.GuardOf(cur), func(x *domain.Instance) {
			x.State, x.Reason = domain.StateTerminating, cause.Error()
		})
		if err == nil {
			_, err = p.Store.Transition(ctx, closed.ID, domain.GuardOf(closed), func(x *domain.Instance) { x.State = domain.StateTerminated })
		}
		if err != nil {
			p.Log.Warn("close row of failed fleet", "instance", r.ID, "err", err)
		}
	}
}

// validate waits for a new instance to register for its job; on failure the
// instance is terminated and the job goes back to the queue.
func (p *Provisioner) validate(ctx context.Context, rq *request, in domain.Instance, led *ledger) {
	err := p.assignAndWait(ctx, rq, in, domain.ViaCold, p.opts.CreationTimeout)
	led.drop(&led.created, in.ID)
	if err == nil {
		rq.outcome, rq.inst = domain.ViaCold, in
		return
	}
	rq.err = err
	p.terminate(ctx, []domain.Instance{in}, err.Error())
	if rq.job.Status == domain.JobAssigned {
		p.unassign(ctx, rq, err.Error())
	}
	if !errors.Is(err, errNotRegistered) {
		p.Log.Warn("new instance not handed to its job", "instance", in.ID, "job", rq.job.ID, "err", err)
	}
}

// image resolves an image name once per process.
func (p *Provisioner) image(ctx context.Context, name string) (string, error) {
	if id, ok := p.images.Load(name); ok {
		return id.(string), nil
	}
	id, err := p.Cloud.ResolveImage(ctx, name)
	if err != nil {
		return "", err
	}
	p.images.Store(name, id)
	return id, nil
}
