package provision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/dispatch"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// selectFor is one claim worker (seed 001): it asks the class's pickup
// manager for candidates until one is claimed and passes its post-claim
// checks, or the pool is exhausted. A candidate that fails a check is
// terminated and the worker tries the next one.
func (p *Provisioner) selectFor(ctx context.Context, class string, rq *request, led *ledger) {
	pm := p.pickupFor(class)
	s := &search{req: RequirementsOf(rq.job.Spec), seen: map[string]int{}}
	for {
		e, exhausted, err := pm.next(ctx, s)
		if err != nil {
			rq.err = err
			return
		}
		if e == nil {
			p.metrics.exhausted.WithLabelValues(exhausted).Inc()
			return
		}
		in, ok := p.claim(ctx, rq.job, *e)
		if !ok {
			continue
		}
		led.add(&led.claimed, in)
		if age := p.Clock.Now().Sub(in.Heartbeat); in.Heartbeat.IsZero() || age > p.opts.HeartbeatMaxAge {
			led.drop(&led.claimed, in.ID)
			p.fail(ctx, rq, in, fmt.Sprintf("post-claim check: last heartbeat %s ago (limit %s)", age.Round(time.Second), p.opts.HeartbeatMaxAge))
			continue
		}
		err = p.assignAndWait(ctx, rq, in, domain.ViaReuse, p.opts.RegistrationTimeout)
		led.drop(&led.claimed, in.ID)
		switch {
		case err == nil:
			rq.outcome, rq.inst = domain.ViaReuse, in
			return
		case errors.Is(err, errNotRegistered):
			p.fail(ctx, rq, in, err.Error())
			continue
		default:
			// Not the instance's fault (GitHub, the store, a cancelled job):
			// give it back for another request and stop here.
			p.giveBack(ctx, in)
			rq.err = err
			return
		}
	}
}

// claim is the atomic idle → claimed transition of seed 001: guarded on
// state ready and no job, so of many claimers exactly one wins.
func (p *Provisioner) claim(ctx context.Context, j domain.Job, e domain.ResourcePoolEntry) (domain.Instance, bool) {
	now := p.Clock.Now()
	in, err := p.Store.Transition(ctx, e.InstanceID, domain.Guard{State: domain.StateReady}, func(in *domain.Instance) {
		in.State, in.Job, in.Reason = domain.StateClaimed, j.Key(), ""
		in.Deadline = p.opts.Deadlines.Until(domain.StateClaimed, now)
	})
	if err != nil {
		if !errors.Is(err, domain.ErrConflict) && !errors.Is(err, domain.ErrNotFound) {
			p.Log.Warn("claim failed", "instance", e.InstanceID, "err", err)
		}
		p.metrics.claims.WithLabelValues("lost").Inc()
		return domain.Instance{}, false
	}
	p.metrics.claims.WithLabelValues("won").Inc()
	return in, true
}

var errNotRegistered = errors.New("instance did not register")

// assignAndWait registers a runner for the job, records the assignment,
// wakes the instance's agent and waits for its registered signal.
func (p *Provisioner) assignAndWait(ctx context.Context, rq *request, in domain.Instance, via domain.Via, timeout time.Duration) error {
	name := dispatch.RunnerName(in.ID, rq.job.ID)
	reg, err := p.GitHub.RegisterRunner(ctx, p.Scope(rq.job), name, rq.job.Labels)
	if err != nil {
		return fmt.Errorf("register runner: %w", err)
	}
	registered := p.Registrations.Wait(in.ID)
	defer p.Registrations.Forget(in.ID)
	now := p.Clock.Now()
	j, err := p.Store.TransitionJob(ctx, rq.job.ID, domain.JobGuardOf(rq.job), func(j *domain.Job) {
		j.Status, j.Via, j.InstanceID, j.AssignedAt = domain.JobAssigned, via, in.ID, now
		j.RunnerName, j.RunnerID, j.RunnerConfig, j.Reason = reg.Name, reg.RunnerID, reg.JITConfig, ""
	})
	if err != nil {
		p.deleteRunner(ctx, rq.job, reg)
		return fmt.Errorf("record assignment: %w", err)
	}
	rq.job = j
	p.Notify(in.CloudID)

	deadline := p.Clock.After(timeout)
	for {
		cur, err := p.Store.GetInstance(ctx, in.ID)
		if err == nil && cur.State == domain.StateRunning && cur.Job == j.Key() {
			return nil
		}
		if err == nil && (cur.Job != j.Key() || cur.State == domain.StateError || cur.State == domain.StateTerminating) {
			break // it failed or was taken away
		}
		select {
		case <-registered:
			registered = p.Registrations.Wait(in.ID)
		case <-deadline:
			return fmt.Errorf("%w for job %d within %s", errNotRegistered, j.ID, timeout)
		case <-p.Clock.After(time.Second):
			// Re-read: another replica may have taken the signal.
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fmt.Errorf("%w for job %d: the instance failed", errNotRegistered, j.ID)
}

// fail terminates an instance that failed its checks and puts the job back
// to queued so the worker can try another candidate.
func (p *Provisioner) fail(ctx context.Context, rq *request, in domain.Instance, why string) {
	p.Log.Warn("reused instance failed its checks; terminating it", "instance", in.ID, "job", rq.job.ID, "reason", why)
	p.metrics.postClaim.WithLabelValues("failed").Inc()
	p.terminate(ctx, []domain.Instance{in}, why)
	if rq.job.Status == domain.JobAssigned {
		p.unassign(ctx, rq, why)
	}
}

// unassign returns the request's job from assigned to queued, unbound.
func (p *Provisioner) unassign(ctx context.Context, rq *request, why string) {
	j, err := p.Store.TransitionJob(ctx, rq.job.ID, domain.JobGuardOf(rq.job), func(x *domain.Job) {
		x.Status, x.Reason = domain.JobQueued, why
		x.InstanceID, x.RunnerName, x.RunnerID, x.RunnerConfig, x.Via = "", "", 0, "", ""
		x.AssignedAt = time.Time{}
	})
	if err != nil {
		p.Log.Warn("unassign job", "job", rq.job.ID, "err", err)
		return
	}
	p.deleteRunner(ctx, rq.job, domain.RunnerRegistration{RunnerID: rq.job.RunnerID, Name: rq.job.RunnerName})
	rq.job = j
}

func (p *Provisioner) deleteRunner(ctx context.Context, j domain.Job, reg domain.RunnerRegistration) {
	if reg.RunnerID == 0 {
		return
	}
	if err := p.GitHub.DeleteRunner(ctx, p.Scope(j), reg.RunnerID); err != nil && !errors.Is(err, domain.ErrNotFound) {
		p.Log.Warn("remove unused runner registration", "runner", reg.Name, "err", err)
	}
}

// giveBack rolls a claimed instance back to idle and returns it to its
// resource pool (seed 001's unsuccessful provisioning).
func (p *Provisioner) giveBack(ctx context.Context, in domain.Instance) {
	now := p.Clock.Now()
	cur, err := p.Store.GetInstance(ctx, in.ID)
	if err != nil || cur.State != domain.StateClaimed {
		return
	}
	back, err := p.Store.Transition(ctx, cur.ID, domain.GuardOf(cur), func(x *domain.Instance) {
		x.State, x.Job = domain.StateReady, ""
		x.Deadline = p.opts.Deadlines.Until(domain.StateReady, now)
	})
	if err != nil {
		p.Log.Warn("roll back claimed instance", "instance", in.ID, "err", err)
		return
	}
	p.metrics.postClaim.WithLabelValues("rolled_back").Inc()
	entry := domain.ResourcePoolEntry{
		InstanceID: back.ID, CloudID: back.CloudID, UsageClass: back.UsageClass, InstanceType: back.InstanceType,
		CPU: back.CPU, Mem: back.MemoryMiB, ResourceClass: domain.ResourceClassFor(back.CPU), Threshold: back.Deadline,
	}
	if err := jobs.OfferToResourcePool(ctx, p.Queue, back.Runner, entry); err != nil {
		p.Log.Warn("return instance to its resource pool", "instance", back.ID, "err", err)
	}
}

// terminate marks instances terminating (the terminator carries out the
// cloud calls in batches) with the reason. Each row is re-read so that the
// guard is on its current version.
func (p *Provisioner) terminate(ctx context.Context, insts []domain.Instance, why string) {
	now := p.Clock.Now()
	for _, in := range insts {
		cur, err := p.Store.GetInstance(ctx, in.ID)
		if err != nil || cur.State == domain.StateTerminating || cur.State == domain.StateTerminated {
			continue
		}
		_, err = p.Store.Transition(ctx, cur.ID, domain.GuardOf(cur), func(x *domain.Instance) {
			x.State, x.Reason = domain.StateTerminating, why
			x.Deadline = p.opts.Deadlines.Until(domain.StateTerminating, now)
		})
		if err != nil {
			p.Log.Warn("mark instance for termination", "instance", in.ID, "err", err)
		}
	}
}
