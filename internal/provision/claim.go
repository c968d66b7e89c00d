package provision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/serving"
)

// A registration wait re-reads the instance in case the registered signal
// reached another replica: after recheckFirst, then twice as long each
// time up to recheckMost. The job does not wait on this (its runner is
// already handed over); only the wait's own bookkeeping does, and a burst
// of new machines booting for a minute would otherwise read each row
// every second.
const (
	recheckFirst = time.Second
	recheckMost  = 8 * time.Second
)

// selectFor is one claim worker: it asks the class's pickup
// manager for candidates until one is claimed and passes its post-claim
// checks, or the pool is exhausted. A candidate that fails a check is
// terminated and the worker tries the next one, as long as the job still
// waits. It tells w when it waits for a candidate and when it looks again
// (looking says which it does).
func (p *Provisioner) selectFor(ctx context.Context, class string, rq *request, led *ledger, w *waves, looking *bool) {
	if p.ReuseAllowed != nil && !p.ReuseAllowed(rq.job) {
		p.metrics.exhausted.WithLabelValues("fresh").Inc()
		return // a fresh machine: creation serves it
	}
	if p.Reused != nil && !p.Reused(class) {
		p.metrics.exhausted.WithLabelValues("unfed").Inc()
		return // nothing ever offers its instances: creation serves it
	}
	pm := p.pickupFor(class)
	s := &search{req: RequirementsOf(rq.spec), seen: map[string]int{}}
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
		if why, outdated := p.outdated(ctx, in); outdated {
			p.retire(ctx, rq, in, why)
			if p.gone(ctx, rq) {
				return
			}
			continue
		}
		led.hold(holding{inst: in, rq: rq, threshold: e.Threshold})
		w.waiting()
		*looking = false
		done := p.useClaimed(ctx, rq, in, e.Threshold, led)
		led.release(in.ID)
		if done {
			return
		}
		w.looking()
		*looking = true
	}
}

// useClaimed runs the post-claim checks on a claimed instance and hands it
// to the job. It reports whether the worker is done: the job is served, or
// it failed for a reason that is not the instance's, or the job no longer
// waits. A failed instance is terminated; an innocent one goes back.
func (p *Provisioner) useClaimed(ctx context.Context, rq *request, in domain.Instance, threshold time.Time, led *ledger) bool {
	limit := p.opts.HeartbeatMaxAge + p.opts.HeartbeatLag
	if age := p.Clock.Now().Sub(in.Heartbeat); in.Heartbeat.IsZero() || age > limit {
		why := fmt.Sprintf("post-claim check: last heartbeat %s ago (limit %s)", age.Round(time.Second), limit)
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
	case errors.Is(err, errNotRegistered) && p.jobLeft(ctx, rq, in):
		// The job ended meanwhile (cancelled, or run by another
		// instance): the instance is not at fault, and goes back unless
		// the job's end took it out of service already.
		p.Log.Info("job no longer waits for its reused instance; giving the instance back", "instance", in.ID, "job", rq.job.ID, "reason", err)
		p.giveBack(ctx, rq, in, threshold, "its job no longer waits: "+err.Error())
		rq.err = errGone
		return true
	case errors.Is(err, errNotRegistered):
		p.fail(ctx, rq, in, err.Error())
		return p.gone(ctx, rq)
	default:
		// Not the instance's fault (GitHub, the store, a cancelled job, a
		// caller that gave up): give it back for another request.
		p.giveBack(ctx, rq, in, threshold, err.Error())
		rq.err = err
		return true
	}
}

// jobLeft reports whether rq's job ended, or another instance took it,
// while in was to register for it. A job that cannot be read is taken to
// wait still.
func (p *Provisioner) jobLeft(ctx context.Context, rq *request, in domain.Instance) bool {
	j, err := p.Store.GetJob(ctx, rq.job.ID)
	if errors.Is(err, domain.ErrNotFound) {
		return true
	}
	return err == nil && (j.Status.Final() || (j.InstanceID != "" && j.InstanceID != in.ID))
}

// outdated reports whether in was launched with another spec than its
// pool's current one (an image roll, a change of the pool's runner), and
// why: its pool's members are replaced for it, and it must not serve jobs
// ahead of them.
func (p *Provisioner) outdated(ctx context.Context, in domain.Instance) (string, bool) {
	if in.Pool == "" {
		return "", false
	}
	current := p.SpecHash(ctx, in.Pool)
	if current == "" || in.SpecHash == current {
		return "", false
	}
	return fmt.Sprintf("outdated: launched with spec %s, pool %s now runs %s", in.SpecHash, in.Pool, current), true
}

// retire terminates a claimed instance that must not serve (outdated),
// unbinding the job it was claimed for in the same change, so that the
// worker tries the next candidate.
func (p *Provisioner) retire(ctx context.Context, rq *request, in domain.Instance, why string) {
	p.Log.Info("reused instance has an outdated spec; retiring it", "instance", in.ID, "job", rq.job.ID, "reason", why)
	p.metrics.postClaim.WithLabelValues("outdated").Inc()
	p.rollBack(ctx, rq, in, serving.Undo{Terminate: why}, why)
}

// gone reports whether the request's job no longer waits for a machine
// from it (served, cancelled, or launched for elsewhere), marking the
// request so; otherwise it refreshes the job for the next try.
func (p *Provisioner) gone(ctx context.Context, rq *request) bool {
	j, err := p.Store.GetJob(ctx, rq.job.ID)
	if err != nil && !errors.Is(err, domain.ErrNotFound) {
		rq.err = fmt.Errorf("re-read job: %w", err)
		return true
	}
	if err != nil {
		rq.err = errGone
		return true
	}
	if err := p.waits(ctx, rq, j); err != nil {
		rq.err = err
		return true
	}
	rq.job = j
	return false
}

// claim is the atomic idle → claimed transition: guarded on
// state ready and no job, so of many claimers exactly one wins. An entry
// whose claim failed for another reason than losing goes back to the
// resource pool, since its instance may still be idle.
func (p *Provisioner) claim(ctx context.Context, j domain.Job, e domain.ResourcePoolEntry, pm *pickup) (domain.Instance, bool) {
	c := p.verbs.ClaimIdle(e.InstanceID, j.Key(), p.Clock.Now())
	in, err := p.Store.Transition(ctx, c.ID, c.Guard, c.Apply)
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

// assignAndWait hands the instance to the job through the serving
// pipeline (runner registered, job and runner recorded together, agent
// woken) and waits for its registered signal.
func (p *Provisioner) assignAndWait(ctx context.Context, rq *request, in domain.Instance, via domain.Via, timeout time.Duration, quit <-chan struct{}) error {
	h := rq.attempt(in, via)
	registered := p.Registrations.Wait(in.ID)
	defer p.Registrations.Forget(in.ID)
	defer p.awaiting.add(in.ID, false, p.Clock.Now().Add(timeout))()
	if ok, _ := p.pipeline.HandOver(ctx, []*serving.Handover{h}); len(ok) == 0 {
		return h.Err
	}
	rq.job = h.Job
	if err := p.awaitRegistration(ctx, rq.job, in.ID, timeout, quit, registered); err != nil {
		return err
	}
	h.Done() // the runner is the job's now
	return nil
}

// awaitRegistration waits until the instance runs the job's runner, fails,
// the timeout passes or the caller gives up.
func (p *Provisioner) awaitRegistration(ctx context.Context, j domain.Job, id string, timeout time.Duration, quit <-chan struct{}, registered <-chan struct{}) error {
	deadline, stop := clock.Closes(p.Clock, timeout)
	defer stop()
	every := recheckFirst
	for {
		ok, err := p.registeredFor(ctx, j, id)
		if ok || err != nil {
			return err
		}
		recheck, stopRecheck := clock.Closes(p.Clock, every)
		every = min(2*every, recheckMost)
		switch p.tasks.Await(registered, recheck, deadline, quit) {
		case 0:
			registered = p.Registrations.Wait(id)
		case 1:
		case 2:
			stopRecheck()
			if ok, err := p.registeredFor(ctx, j, id); ok || err != nil {
				return err
			}
			return fmt.Errorf("%w for job %d within %s", errNotRegistered, j.ID, timeout)
		case 3:
			stopRecheck()
			// It may have registered since the last look: undoing that
			// would delete a runner that may have taken the job already.
			if ok, err := p.registeredFor(ctx, j, id); ok || err != nil {
				return err
			}
			p.awaiting.noteCut()
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
		// with the same labels: jobs.FollowRunner handed this job to the runner
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

// fail terminates an instance that failed its checks and, in the same
// change, unbinds its job so that the worker can try another candidate.
func (p *Provisioner) fail(ctx context.Context, rq *request, in domain.Instance, why string) {
	p.Log.Warn("reused instance failed its checks; terminating it", "instance", in.ID, "job", rq.job.ID, "reason", why)
	p.metrics.postClaim.WithLabelValues("failed").Inc()
	p.rollBack(ctx, rq, in, serving.Undo{Terminate: why}, why)
}

// rollBack undoes the request's attempt on in: its job unbound and the
// instance given back or terminated as undo says, in one change; the runner
// registered for the attempt is deleted.
func (p *Provisioner) rollBack(ctx context.Context, rq *request, in domain.Instance, undo serving.Undo, why string) (domain.Instance, bool) {
	h := rq.h
	if h == nil || h.Inst.ID != in.ID {
		h = rq.attempt(in, "")
	}
	back, ok, err := p.pipeline.RollBack(ctx, h, undo, why)
	rq.job, rq.h = h.Job, nil
	if err != nil {
		p.Log.Warn("roll back instance", "instance", in.ID, "job", rq.job.ID, "err", err)
	}
	return back, ok
}

// giveBack rolls a claimed instance back to idle and returns it to its
// resource pool (unsuccessful provisioning), with the expiry
// its entry had: a failed claim does not extend an instance's idle life.
func (p *Provisioner) giveBack(ctx context.Context, rq *request, in domain.Instance, threshold time.Time, why string) {
	if threshold.IsZero() {
		threshold = p.opts.Deadlines.Until(domain.StateReady, p.Clock.Now())
	}
	back, ok := p.rollBack(ctx, rq, in, serving.Undo{Back: domain.StateReady, Deadline: threshold}, why)
	if !ok || back.State != domain.StateReady {
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
