package agents

import (
	"context"
	"fmt"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// failed: the agent gave up. The instance goes to error (the converger or
// the reaper terminates it) and, in the same change, a job it had not
// started goes back to its queue. An instance already leaving (its machine
// taken back) is left as it is: it is out of service, and its deadline
// ends it when the cloud takes the machine.
func (s *Service) failed(ctx context.Context, in domain.Instance, sig domain.Signal) error {
	if sig.Job != "" && in.Job != "" && sig.Job != in.Job && sig.Job != runnerJob(in) {
		return reject(sig.Kind, "instance is bound to job %q, not %q", in.Job, sig.Job)
	}
	reason := sig.Reason
	if reason == "" {
		reason = "agent reported a failure"
	}
	if in.Leaving() {
		s.log.Info("agent of an instance leaving service reports a failure; it ends at its deadline as planned", "instance", in.ID, "reason", reason, "until", in.Deadline)
		return nil
	}
	switch in.State {
	case domain.StateTerminating, domain.StateTerminated:
		return nil
	case domain.StateError:
		// A repeat. The first report took the instance out of service and
		// its unstarted job back to its queue in one change; a row that
		// still holds an unstarted job (written by an older bullpen, in
		// two steps) has its job requeued now.
		if in.Job == "" || in.JobStarted {
			return nil
		}
		id, err := domain.ParseJobKey(in.Job)
		if err != nil {
			return reject(sig.Kind, "%v", err)
		}
		return jobs.Requeue(ctx, s.store, s.queue, id, in.ID, "instance failed: "+reason)
	}
	_, retired, err := jobs.Retire(ctx, s.store, s.queue, in, domain.StateError, reason,
		s.opts.Deadlines.Until(domain.StateError, s.clock.Now()))
	if retired {
		// Written, even when its requeued job's message was not sent.
		s.metrics.instancesFailed.Inc()
		s.log.Warn("instance failed", "instance", in.ID, "state", in.State, "reason", reason)
	}
	if err != nil {
		return fmt.Errorf("failed %s: %w", in.ID, err)
	}
	if !retired {
		return fmt.Errorf("failed %s: %w", in.ID, domain.ErrConflict) // changed meanwhile: the agent retries
	}
	if in.Job != "" && !in.JobStarted {
		s.noteRepeatedFailure(ctx, in.Job, reason)
	}
	return nil
}

// repeatedFailures is how many failed attempts at serving a job (its
// Attempts: instances that failed it, or were lost, before it started) make
// it a human's: a runner command, an image or a warm-up that cannot work
// fails every machine, and the job is retried ever more slowly
// (jobs.RetryDelay) for as long as GitHub keeps it queued.
const repeatedFailures = 3

// noteRepeatedFailure logs, as an error, a job sent back to its queue after
// its instance failed when that has happened repeatedly.
func (s *Service) noteRepeatedFailure(ctx context.Context, key, reason string) {
	id, err := domain.ParseJobKey(key)
	if err != nil {
		return
	}
	j, err := s.store.GetJob(ctx, id)
	if err != nil || j.Status != domain.JobQueued || j.Attempts < repeatedFailures {
		return
	}
	s.log.Error("a job keeps failing on its instances: check the runner command, image and warm-up (the failed machines' agent logs say why)",
		"job", j.ID, "pool", j.Pool, "failed_attempts", j.Attempts, "last_reason", reason, "next_try_in", jobs.RetryDelay(j.Attempts))
}
