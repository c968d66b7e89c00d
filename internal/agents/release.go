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

// Finish records a job's end (from the completed webhook or the agent) and
// releases its instance: back toward the resource pool when the instance's
// policy allows another job, else terminated. Repeats are harmless.
func (s *Service) Finish(ctx context.Context, jobID int64, conclusion string) error {
	now := s.clock.Now()
	job, err := jobs.MarkCompleted(ctx, s.store, jobID, now, conclusion)
	if err != nil || job.InstanceID == "" {
		return err
	}
	// A lost race is retried on the row as it is now: the winner may have
	// changed another field (JobStarted, from the in_progress webhook) and
	// left the release to us.
	for range releaseAttempts {
		in, err := s.store.GetInstance(ctx, job.InstanceID)
		if errors.Is(err, domain.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("release for job %d: %w", jobID, err)
		}
		if in.Job != job.Key() || !(jobs.ServesJob(in.State) || in.State == domain.StateError) {
			return nil // already released, or being terminated
		}
		err = s.release(ctx, in, now)
		if !errors.Is(err, domain.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("release for job %d: instance %s keeps changing", jobID, job.InstanceID)
}

// releaseAttempts bounds Finish's retries against concurrent writers.
const releaseAttempts = 8

func (s *Service) release(ctx context.Context, in domain.Instance, now time.Time) error {
	p := s.opts.Policy(in)
	served := in.JobsServed + 1
	why := ""
	switch {
	case in.State == domain.StateError:
		// It failed while its job ran: the job is over, so it can go now,
		// for the reason it failed.
		why = cmp.Or(in.Reason, "failed during its job")
	case !p.Reuse:
		why = "job done"
	case in.State != domain.StateRunning:
		why = "job ended before its runner registered"
	case p.MaxJobs > 0 && served >= p.MaxJobs:
		why = fmt.Sprintf("served %d jobs (max-jobs-per-instance)", served)
	case p.MaxAge > 0 && now.Sub(in.CreatedAt) >= p.MaxAge:
		why = "older than max-age"
	}
	_, err := s.store.Transition(ctx, in.ID, domain.GuardOf(in), func(i *domain.Instance) {
		i.Job, i.JobStarted, i.JobsServed = "", false, served
		i.RunnerName, i.RunnerConfig = "", "" // spent: a just-in-time runner serves one job
		if why == "" {
			// Clearing the job is the trigger of seed 003's handshake.
			i.State = domain.StateReleasing
			i.Deadline = s.opts.Deadlines.Until(domain.StateReleasing, now)
			return
		}
		i.State, i.Reason = domain.StateTerminating, why
		i.Deadline = s.opts.Deadlines.Until(domain.StateTerminating, now)
	})
	if err != nil {
		return fmt.Errorf("release %s: %w", in.ID, err)
	}
	if why == "" {
		s.metrics.releases.WithLabelValues("releasing").Inc()
		s.Notify(in.CloudID)
	} else {
		s.metrics.releases.WithLabelValues("terminated").Inc()
		s.log.Info("instance retired after its job", "instance", in.ID, "reason", why)
	}
	return nil
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
		s.metrics.releases.WithLabelValues("timed_out").Inc()
		_, err := s.store.Transition(ctx, in.ID, domain.GuardOf(in), func(x *domain.Instance) {
			x.State, x.Reason = domain.StateTerminating, "release timed out"
			x.Deadline = s.opts.Deadlines.Until(domain.StateTerminating, now)
		})
		if err != nil && !errors.Is(err, domain.ErrConflict) {
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
	_, err := s.store.Transition(ctx, in.ID, domain.GuardOf(in), func(i *domain.Instance) {
		i.State, i.Deadline = domain.StateReady, deadline
	})
	if err != nil {
		return fmt.Errorf("deregistered %s: %w", in.ID, err)
	}
	s.metrics.releases.WithLabelValues("pooled").Inc()
	s.log.Info("instance back in the resource pool", "instance", in.ID, "runner", in.Runner, "jobs_served", in.JobsServed)
	return nil
}
