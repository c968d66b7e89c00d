package provision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// recheckEvery is how often a registration wait re-reads the instance, in
// case the registered signal reached another replica.
const recheckEvery = time.Second

// selectFor is one claim worker (seed 001): it asks the class's pickup
// manager for candidates until one is claimed and passes its post-claim
// checks, or the pool is exhausted. A candidate that fails a check is
// terminated and the worker tries the next one, as long as the job still
// waits.
func (p *Provisioner) selectFor(ctx context.Context, class string, rq *request, led *ledger) {
	if p.ReuseAllowed != nil && !p.ReuseAllowed(rq.job) {
		p.metrics.exhausted.WithLabelValues("fresh").Inc()
		return // a fresh machine: creation serves it
	}
	pm := p.pickupFor(class)
	s := &search{req: RequirementsOf(rq.job.Spec), seen: map[string]int{}}
	for !led.stopped() {
		e, exhausted, err := pm.next(ctx, s)
		if err != nil {
			rq.err = err
			return
		}
		if e == nil {
			p.metrics.exhausted.WithLabelValues(exhausted).Inc()
			return
		}
		in, ok := p.claim(ctx, rq.job, *e, pm)
		if !ok {
			continue
		}
		led.hold(holding{inst: in, rq: rq, threshold: e.Threshold})
		done := p.useClaimed(ctx, rq, in, e.Threshold, led)
		led.release(in.ID)
		if done {
			return
		}
	}
}

// useClaimed runs the post-claim checks on a claimed instance and hands it
// to the job. It reports whether the worker is done: the job is served, or
// it failed for a reason that is not the instance's, or the job no longer
// waits. A failed instance is terminated; an innocent one goes back.
func (p *Provisioner) useClaimed(ctx context.Context, rq *request, in domain.Instance, threshold time.Time, led *ledger) bool {
	if age := p.Clock.Now().Sub(in.Heartbeat); in.Heartbeat.IsZero() || age > p.opts.HeartbeatMaxAge {
		why := fmt.Sprintf("post-claim check: last heartbeat %s ago (limit %s)", age.Round(time.Second), p.opts.HeartbeatMaxAge)
		if in.Heartbeat.IsZero() {
			why = "post-claim check: no heartbeat ever"
		}
		p.fail(ctx, rq, in, why)
		return p.gone(ctx, rq)
	}
	err := p.assignAndWait(ctx, rq, in, domain.ViaReuse, p.opts.RegistrationTimeout, led.quit)
	switch {
	case err == nil:
		rq.outcome, rq.inst = domain.ViaReuse, in
		return true
	case errors.Is(err, errNotRegistered):
		p.fail(ctx, rq, in, err.Error())
		return p.gone(ctx, rq)
	default:
		// Not the instance's fault (GitHub, the store, a cancelled job, a
		// caller that gave up): give it back for another request.
		p.unassign(ctx, rq, in.ID, err.Error())
		p.dropRunner(ctx, rq)
		p.giveBack(ctx, in, threshold)
		rq.err = err
		return true
	}
}

// gone reports whether the request's job no longer waits for a runner,
// marking the request so; otherwise it refreshes the job for the next try.
func (p *Provisioner) gone(ctx context.Context, rq *request) bool {
	j, err := p.Store.GetJob(ctx, rq.job.ID)
	if err != nil && !errors.Is(err, domain.ErrNotFound) {
		rq.err = fmt.Errorf("re-read job: %w", err)
		return true
	}
	if err != nil || !waiting(j) {
		rq.err = errGone
		return true
	}
	rq.job = j
	return false
}

// claim is the atomic idle → claimed transition of seed 001: guarded on
// state ready and no job, so of many claimers exactly one wins. An entry
// whose claim failed for another reason than losing goes back to the
// resource pool, since its instance may still be idle.
func (p *Provisioner) claim(ctx context.Context, j domain.Job, e domain.ResourcePoolEntry, pm *pickup) (domain.Instance, bool) {
	now := p.Clock.Now()
	in, err := p.Store.Transition(ctx, e.InstanceID, domain.Guard{State: domain.StateReady}, func(in *domain.Instance) {
		in.State, in.Job, in.Reason = domain.StateClaimed, j.Key(), ""
		in.Deadline = p.opts.Deadlines.Until(domain.StateClaimed, now)
	})
	if err != nil {
		p.metrics.claims.WithLabelValues("lost").Inc()
		if !errors.Is(err, domain.ErrConflict) && !errors.Is(err, domain.ErrNotFound) {
			p.Log.Warn("claim failed", "instance", e.InstanceID, "err", err)
			if err := pm.requeue(ctx, e); err != nil {
				p.Log.Warn("return entry to its resource pool", "instance", e.InstanceID, "err", err)
			}
		}
		return domain.Instance{}, false
	}
	p.metrics.claims.WithLabelValues("won").Inc()
	return in, true
}

var errNotRegistered = errors.New("instance did not register")

// assignAndWait registers a runner for the job, records the assignment,
// wakes the instance's agent and waits for its registered signal.
func (p *Provisioner) assignAndWait(ctx context.Context, rq *request, in domain.Instance, via domain.Via, timeout time.Duration, quit <-chan struct{}) error {
	name := domain.RunnerName(in.ID, rq.job.ID)
	reg, err := p.GitHub.RegisterRunner(ctx, p.Scope(rq.job), name, rq.job.Labels)
	if err != nil {
		return fmt.Errorf("register runner: %w", err)
	}
	rq.reg = reg
	registered := p.Registrations.Wait(in.ID)
	defer p.Registrations.Forget(in.ID)
	now := p.Clock.Now()
	j, err := p.Store.TransitionJob(ctx, rq.job.ID, domain.JobGuardOf(rq.job), func(j *domain.Job) {
		j.Status, j.Via, j.InstanceID, j.AssignedAt = domain.JobAssigned, via, in.ID, now
		j.RunnerName, j.RunnerID, j.Reason = reg.Name, reg.RunnerID, ""
	})
	if err != nil {
		return fmt.Errorf("record assignment: %w", err)
	}
	rq.job = j
	// The runner goes on the instance last: its agent starts it as soon as
	// it is there, so the job must already be the instance's.
	if err := p.giveRunner(ctx, in.ID, rq.job.Key(), reg); err != nil {
		p.unassign(ctx, rq, in.ID, err.Error())
		return err
	}
	p.Notify(in.CloudID)
	if err := p.awaitRegistration(ctx, j, in.ID, timeout, quit, registered); err != nil {
		return err
	}
	rq.reg = domain.RunnerRegistration{} // the job's now
	return nil
}

// awaitRegistration waits until the instance runs the job's runner, fails,
// the timeout passes or the caller gives up.
func (p *Provisioner) awaitRegistration(ctx context.Context, j domain.Job, id string, timeout time.Duration, quit <-chan struct{}, registered <-chan struct{}) error {
	deadline, stop := p.after(timeout)
	defer stop()
	for {
		ok, err := p.registeredFor(ctx, j, id)
		if ok || err != nil {
			return err
		}
		recheck, stopRecheck := p.after(recheckEvery)
		select {
		case <-registered:
			registered = p.Registrations.Wait(id)
		case <-recheck:
		case <-deadline:
			stopRecheck()
			if ok, err := p.registeredFor(ctx, j, id); ok || err != nil {
				return err
			}
			return fmt.Errorf("%w for job %d within %s", errNotRegistered, j.ID, timeout)
		case <-quit:
			stopRecheck()
			// It may have registered since the last look: undoing that
			// would delete a runner that may have taken the job already.
			if ok, err := p.registeredFor(ctx, j, id); ok || err != nil {
				return err
			}
			return errStopped
		}
		stopRecheck()
	}
}

// registeredFor reports whether instance id registered for job j; an error
// wrapping errNotRegistered means it never will (it failed, or left the job).
// A job that already ran on the instance counts as registered: a short job
// can finish before a replica that missed the signal looks again.
func (p *Provisioner) registeredFor(ctx context.Context, j domain.Job, id string) (bool, error) {
	cur, err := p.Store.GetInstance(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return false, fmt.Errorf("%w for job %d: the instance is gone", errNotRegistered, j.ID)
	}
	if err != nil {
		return false, nil // look again later
	}
	if cur.Job == j.Key() {
		switch cur.State {
		case domain.StateRunning:
			return true, nil
		case domain.StateError, domain.StateTerminating, domain.StateTerminated:
			return false, fmt.Errorf("%w for job %d: the instance is %s", errNotRegistered, j.ID, cur.State)
		}
		return false, nil
	}
	if cur.State == domain.StateRunning && cur.Job != "" {
		// Its runner registered, and GitHub gave it another queued job
		// with the same labels: jobs.Rebind handed this job to the runner
		// that job leaves, or requeued it. Either way it is not ours to
		// wait for any more.
		return true, nil
	}
	now, err := p.Store.GetJob(ctx, j.ID)
	if err != nil && !errors.Is(err, domain.ErrNotFound) {
		return false, nil // look again later
	}
	if err == nil && now.InstanceID == id && (now.Status == domain.JobRunning || !now.StartedAt.IsZero()) {
		return true, nil
	}
	return false, fmt.Errorf("%w for job %d: the instance left the job (%s)", errNotRegistered, j.ID, cur.State)
}

// fail terminates an instance that failed its checks and unbinds its job
// so that the worker can try another candidate.
func (p *Provisioner) fail(ctx context.Context, rq *request, in domain.Instance, why string) {
	p.Log.Warn("reused instance failed its checks; terminating it", "instance", in.ID, "job", rq.job.ID, "reason", why)
	p.metrics.postClaim.WithLabelValues("failed").Inc()
	p.terminate(ctx, []domain.Instance{in}, why)
	p.unassign(ctx, rq, in.ID, why)
	p.dropRunner(ctx, rq)
}

// unassign returns the request's job to queued and unbound, if it is still
// assigned to instance id. It re-reads the job, so it is safe whatever the
// request last saw.
func (p *Provisioner) unassign(ctx context.Context, rq *request, id, why string) {
	j, err := p.Store.GetJob(ctx, rq.job.ID)
	if err != nil {
		p.Log.Warn("unassign job: re-read", "job", rq.job.ID, "err", err)
		return
	}
	rq.job = j
	if j.Status != domain.JobAssigned || j.InstanceID != id {
		return
	}
	j, err = p.Store.TransitionJob(ctx, j.ID, domain.JobGuardOf(j), func(x *domain.Job) {
		x.Status, x.Reason = domain.JobQueued, why
		x.InstanceID, x.RunnerName, x.RunnerID, x.Via = "", "", 0, ""
		x.AssignedAt = time.Time{}
	})
	if err != nil {
		p.Log.Warn("unassign job", "job", rq.job.ID, "err", err)
		return
	}
	rq.job = j
}

// dropRunner deletes the runner registered for the instance being tried,
// which will never run it.
func (p *Provisioner) dropRunner(ctx context.Context, rq *request) {
	reg := rq.reg
	rq.reg = domain.RunnerRegistration{}
	if reg.RunnerID == 0 {
		return
	}
	if err := p.GitHub.DeleteRunner(ctx, p.Scope(rq.job), reg.RunnerID); err != nil && !errors.Is(err, domain.ErrNotFound) {
		p.Log.Warn("remove unused runner registration", "runner", reg.Name, "err", err)
	}
}

// giveBack rolls a claimed instance back to idle and returns it to its
// resource pool (seed 001's unsuccessful provisioning), with the expiry
// its entry had: a failed claim does not extend an instance's idle life.
func (p *Provisioner) giveBack(ctx context.Context, in domain.Instance, threshold time.Time) {
	cur, err := p.Store.GetInstance(ctx, in.ID)
	if err != nil || cur.State != domain.StateClaimed || cur.Job != in.Job {
		return
	}
	if threshold.IsZero() {
		threshold = p.opts.Deadlines.Until(domain.StateReady, p.Clock.Now())
	}
	back, err := p.Store.Transition(ctx, cur.ID, domain.GuardOf(cur), func(x *domain.Instance) {
		x.State, x.Job, x.Deadline = domain.StateReady, "", threshold
		x.RunnerName, x.RunnerConfig = "", ""
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
// guard is on its current version; one that has meanwhile been bound to
// another job, or whose job started, is no longer provisioning's to end.
func (p *Provisioner) terminate(ctx context.Context, insts []domain.Instance, why string) {
	now := p.Clock.Now()
	for _, in := range insts {
		cur, err := p.Store.GetInstance(ctx, in.ID)
		if err != nil || cur.State == domain.StateTerminating || cur.State == domain.StateTerminated {
			continue
		}
		if cur.Job != in.Job || cur.JobStarted {
			p.Log.Info("instance moved on; not terminating it", "instance", in.ID,
				"job", in.Job, "now_job", cur.Job, "job_started", cur.JobStarted, "reason", why)
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

// giveRunner records on the instance the runner registered for it: its
// agent starts that runner, whichever job GitHub then gives it.
func (p *Provisioner) giveRunner(ctx context.Context, id, job string, reg domain.RunnerRegistration) error {
	for range 8 {
		cur, err := p.Store.GetInstance(ctx, id)
		if err != nil {
			return fmt.Errorf("record runner: %w", err)
		}
		if cur.Job != job {
			return fmt.Errorf("record runner: instance %s left job %s", id, job)
		}
		_, err = p.Store.Transition(ctx, id, domain.GuardOf(cur), func(x *domain.Instance) {
			x.RunnerName, x.RunnerConfig = reg.Name, reg.JITConfig
		})
		if !errors.Is(err, domain.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("record runner: instance %s keeps changing", id)
}
