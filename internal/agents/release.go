package agents

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// Finish records a job's end as GitHub reports it (the completed webhook),
// with GitHub's conclusion, and releases its instance (see end). A job its
// agent's report ended first has no conclusion yet, the agent knowing only
// how its runner process exited: it takes GitHub's now. Repeats are
// harmless.
func (s *Service) Finish(ctx context.Context, jobID int64, conclusion string) error {
	job, err := s.end(ctx, jobID, conclusion)
	if err != nil {
		return err
	}
	return s.conclude(ctx, job, conclusion)
}

// end completes a job that is not over yet, with conclusion, and releases
// its instance, in one atomic change: back toward the resource pool when
// the instance's policy allows another job, else terminated. It returns the
// job as read before the change (zero when the store has no such job).
func (s *Service) end(ctx context.Context, jobID int64, conclusion string) (domain.Job, error) {
	now := s.clock.Now()
	for range releaseAttempts {
		job, err := s.store.GetJob(ctx, jobID)
		if errors.Is(err, domain.ErrNotFound) {
			return domain.Job{}, nil
		}
		if err != nil {
			return domain.Job{}, fmt.Errorf("finish job %d: %w", jobID, err)
		}
		var c domain.Change
		if !job.Status.Final() {
			c.Jobs = append(c.Jobs, s.verbs.CompleteJob(job, now, conclusion))
		}
		in, why, ok, err := s.releasable(ctx, job, now)
		if err != nil {
			return domain.Job{}, fmt.Errorf("finish job %d: %w", jobID, err)
		}
		if ok {
			c.Instances = append(c.Instances, s.verbs.Release(in, why, now))
		}
		if c.Empty() {
			return job, nil
		}
		_, err = s.store.Commit(ctx, c)
		if errors.Is(err, domain.ErrConflict) {
			continue // a row moved on (the in_progress webhook, say): decide again
		}
		if err != nil {
			return domain.Job{}, fmt.Errorf("finish job %d: %w", jobID, err)
		}
		if ok {
			s.released(in, why)
		}
		return job, nil
	}
	return domain.Job{}, fmt.Errorf("finish job %d: its rows keep changing", jobID)
}

// conclude gives GitHub's conclusion to a job that was already completed
// without one (its agent's report came first). A conclusion it has is
// kept: GitHub's completed delivery may come more than once.
func (s *Service) conclude(ctx context.Context, job domain.Job, conclusion string) error {
	for range releaseAttempts {
		if conclusion == "" || job.Status != domain.JobCompleted || job.Conclusion != "" {
			return nil
		}
		r := s.verbs.ConcludeJob(job, conclusion)
		_, err := s.store.TransitionJob(ctx, r.ID, r.Guard, r.Apply)
		switch {
		case err == nil:
			s.log.Debug("GitHub's conclusion recorded on a job its agent reported finished", "job", job.ID, "conclusion", conclusion)
			return nil
		case errors.Is(err, domain.ErrNotFound):
			return nil
		case !errors.Is(err, domain.ErrConflict):
			return fmt.Errorf("record the conclusion of job %d: %w", job.ID, err)
		}
		if job, err = s.store.GetJob(ctx, job.ID); err != nil {
			if errors.Is(err, domain.ErrNotFound) {
				return nil
			}
			return fmt.Errorf("record the conclusion of job %d: %w", job.ID, err)
		}
	}
	return fmt.Errorf("record the conclusion of job %d: its row keeps changing", job.ID)
}

// releaseAttempts bounds Finish's retries against concurrent writers.
const releaseAttempts = 8

// releasable returns the instance that ran job, when it still holds it, and
// why it retires after the job ("" when it goes back to the resource pool).
func (s *Service) releasable(ctx context.Context, job domain.Job, now time.Time) (domain.Instance, string, bool, error) {
	if job.InstanceID == "" {
		return domain.Instance{}, "", false, nil
	}
	in, err := s.store.GetInstance(ctx, job.InstanceID)
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Instance{}, "", false, nil
	}
	if err != nil {
		return domain.Instance{}, "", false, err
	}
	if in.Job != job.Key() || !(jobs.ServesJob(in.State) || in.State == domain.StateError) {
		return domain.Instance{}, "", false, nil // already released, or being terminated
	}
	return in, s.retireReason(ctx, in, now), true, nil
}

// retireReason says why in is terminated after its job rather than
// released for another one, or "" when its policy reuses it.
func (s *Service) retireReason(ctx context.Context, in domain.Instance, now time.Time) string {
	p := s.opts.Policy(in)
	served := in.JobsServed + 1
	switch {
	case in.State == domain.StateError:
		// It failed while its job ran: the job is over, so it can go now,
		// for the reason it failed.
		return cmp.Or(in.Reason, "failed during its job")
	case in.Leaving():
		// The cloud is taking its machine back: it takes no other job.
		return in.Reason
	case !p.Reuse:
		return "job done"
	case in.State != domain.StateRunning:
		return "job ended before its runner registered"
	case p.MaxJobs > 0 && served >= p.MaxJobs:
		return fmt.Sprintf("served %d jobs (max-jobs-per-instance)", served)
	case p.MaxAge > 0 && now.Sub(in.CreatedAt) >= p.MaxAge:
		return "older than max-age"
	case s.outdated(ctx, in):
		return "its pool's spec changed since it was launched"
	}
	return ""
}

// outdated reports whether in was launched for its pool before the pool's
// spec changed (a new image, a roll): reused, it would serve the old spec
// for as long as it keeps being pooled.
func (s *Service) outdated(ctx context.Context, in domain.Instance) bool {
	if s.opts.SpecHash == nil || in.Pool == "" || in.SpecHash == "" {
		return false
	}
	hash := s.opts.SpecHash(ctx, in.Pool)
	return hash != "" && hash != in.SpecHash
}

// released tells the agent of an instance released for reuse to
// deregister, and counts the release.
func (s *Service) released(in domain.Instance, why string) {
	if why == "" {
		s.metrics.releases.WithLabelValues("releasing").Inc()
		s.Notify(in.CloudID)
		return
	}
	s.metrics.releases.WithLabelValues("terminated").Inc()
	s.log.Info("instance retired after its job", "instance", in.ID, "reason", why)
}

// deregistered completes a release: the instance goes back to the resource
// pool of its class, unless the release timed out (then it is never pooled).
func (s *Service) deregistered(ctx context.Context, in domain.Instance) error {
	if in.State != domain.StateReleasing {
		return reject(domain.SignalDeregistered, "instance is %s, not releasing", in.State)
	}
	now := s.clock.Now()
	if in.Expired(now) {
		// Never pooled: terminated now, so the agent stops releasing.
		// Counted only once terminated here: a row the terminator expired
		// first is its count, and a write that failed is counted on the
		// retry that succeeds.
		r := s.verbs.Terminate(in, "release timed out", now)
		switch _, err := s.store.Transition(ctx, r.ID, r.Guard, r.Apply); {
		case err == nil:
			s.metrics.releases.WithLabelValues("timed_out").Inc()
		case !errors.Is(err, domain.ErrConflict):
			return fmt.Errorf("deregistered %s: %w", in.ID, err)
		}
		return reject(domain.SignalDeregistered, "release timed out at %s", in.Deadline.Format(time.RFC3339))
	}
	p := s.opts.Policy(in)
	idle := p.IdleLifetime
	if idle <= 0 {
		idle = s.opts.Deadlines.Ready
	}
	deadline := now.Add(idle)
	if p.MaxAge > 0 && in.CreatedAt.Add(p.MaxAge).Before(deadline) {
		// An instance at its max-age takes no new job: its idle time ends
		// there, and the reaper terminates it at its deadline.
		deadline = in.CreatedAt.Add(p.MaxAge)
	}
	entry := domain.ResourcePoolEntry{
		InstanceID: in.ID, CloudID: in.CloudID, UsageClass: in.UsageClass, InstanceType: in.InstanceType,
		CPU: in.CPU, Mem: in.MemoryMiB, ResourceClass: domain.ResourceClassFor(in.CPU), Threshold: deadline,
	}
	// The entry goes first: if the transition then fails, the entry points
	// at an instance that is not ready, and a claim on it simply loses.
	if err := jobs.OfferToResourcePool(ctx, s.queue, in.Runner, entry); err != nil {
		return err
	}
	r := s.verbs.Pool(in, deadline)
	if _, err := s.store.Transition(ctx, r.ID, r.Guard, r.Apply); err != nil {
		return fmt.Errorf("deregistered %s: %w", in.ID, err)
	}
	s.metrics.releases.WithLabelValues("pooled").Inc()
	s.log.Info("instance back in the resource pool", "instance", in.ID, "runner", in.Runner, "jobs_served", in.JobsServed)
	return nil
}
