package intake

import (
	"context"
	"errors"
	"fmt"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// progress applies in_progress and completed events. Those of jobs that
// are not ours by their labels (GitHub-hosted runners, other stacks) cost
// one store read: a job this stack recorded is still its to end, whatever
// the labels as delivered, or the configuration in force now, say.
func (in *Intake) progress(ctx context.Context, e event) error {
	w := e.ev.Job
	_, err := in.Store.GetJob(ctx, w.ID)
	switch {
	case errors.Is(err, domain.ErrNotFound) && !e.decision.Ours:
		in.metrics.events.WithLabelValues(e.ev.Action, "not_ours").Inc()
		return in.followForeign(ctx, e)
	case errors.Is(err, domain.ErrNotFound):
		if err := in.recordEarly(ctx, e); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("read job %d: %w", w.ID, err)
	}
	switch e.ev.Action {
	case webhook.ActionInProgress:
		at := w.StartedAt
		if at.IsZero() {
			at = in.Clock.Now()
		}
		// GitHub says which runner took the job; with several jobs of the
		// same labels it may not be the one bullpen assigned.
		if _, err := jobs.FollowRunner(ctx, in.Store, in.Queue, w.ID, w.RunnerName, in.Clock.Now()); err != nil {
			return fmt.Errorf("job %d started on %s: %w", w.ID, w.RunnerName, err)
		}
		if err := jobs.MarkRunning(ctx, in.Store, w.ID, at, w.RunnerName); err != nil {
			return fmt.Errorf("job %d started: %w", w.ID, err)
		}
		in.metrics.events.WithLabelValues(e.ev.Action, "recorded").Inc()
		return in.protect(ctx, w.ID)
	case webhook.ActionCompleted:
		// Release the instance whose runner ran the job.
		if _, err := jobs.FollowRunnerEnded(ctx, in.Store, in.Queue, w.ID, w.RunnerName, in.Clock.Now()); err != nil {
			return fmt.Errorf("job %d completed on %s: %w", w.ID, w.RunnerName, err)
		}
		if err := in.Finisher.Finish(ctx, w.ID, w.Conclusion); err != nil {
			return fmt.Errorf("job %d completed: %w", w.ID, err)
		}
		in.metrics.events.WithLabelValues(e.ev.Action, "recorded").Inc()
	}
	return nil
}

// followForeign follows GitHub's report that a runner of bullpen's took a
// job that is not this stack's: a job of another environment whose labels
// the runner carries (its own job's labels are a superset of the other's).
// The runner's own job goes back to its queue, as it will never run there;
// the end of the job the runner took retires the runner's instance, as a
// runner serves one job.
func (in *Intake) followForeign(ctx context.Context, e event) error {
	w := e.ev.Job
	if _, _, ok := domain.ParseRunnerName(w.RunnerName); !ok {
		return nil
	}
	ended := e.ev.Action == webhook.ActionCompleted
	follow := jobs.FollowRunner
	if ended {
		follow = jobs.FollowRunnerEnded
	}
	moved, err := follow(ctx, in.Store, in.Queue, w.ID, w.RunnerName, in.Clock.Now())
	if err != nil {
		return fmt.Errorf("job %d, not ours, %s on %s: %w", w.ID, e.ev.Action, w.RunnerName, err)
	}
	switch {
	case moved && ended: // the take was warned of when the job started
		in.Log.Info("a runner of this stack ran a job that is not this stack's to its end; its instance is retired",
			"runner", w.RunnerName, "job", w.ID, "repo", e.ev.Repo)
	case moved:
		in.Log.Warn("a runner of this stack took a job that is not this stack's; the job the runner was started for goes back to its queue (give jobs of different stacks labels neither's runners carry)",
			"runner", w.RunnerName, "job", w.ID, "repo", e.ev.Repo, "labels", w.Labels)
	}
	return nil
}

// protect marks the job's instance as running a job: no loop may touch it.
// A job that is not running (an in_progress delivered after its completed)
// leaves its instance alone: the instance is being released.
func (in *Intake) protect(ctx context.Context, jobID int64) error {
	j, err := in.Store.GetJob(ctx, jobID)
	if errors.Is(err, domain.ErrNotFound) || (err == nil && (j.InstanceID == "" || j.Status != domain.JobRunning)) {
		return nil
	}
	if err != nil {
		return err
	}
	for range 8 {
		inst, err := in.Store.GetInstance(ctx, j.InstanceID)
		if errors.Is(err, domain.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if inst.Job != j.Key() || inst.JobStarted || inst.State.Terminal() {
			return nil
		}
		started := domain.Lifecycle{}.JobStarted(inst)
		_, err = in.Store.Transition(ctx, started.ID, started.Guard, started.Apply)
		if !errors.Is(err, domain.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("instance %s of job %d keeps changing", j.InstanceID, jobID)
}

// recordEarly records a job of ours, not recorded yet, that GitHub reports
// started or finished before its queued delivery was processed (deliveries
// are not ordered, and a failed queued delivery comes back after later
// ones). Recorded in the status the event gives it, the job is found by its
// late queued delivery, which then sends nothing: else that delivery would
// create it queued and bind an instance and a runner to a job that is over.
func (in *Intake) recordEarly(ctx context.Context, e event) error {
	w := e.ev.Job
	d := e.decision
	if !d.Ours || d.Reject != "" {
		// Not ours, or never to be served: its queued delivery, if it
		// comes, records and rejects it as it would have.
		return nil
	}
	now := in.Clock.Now()
	j := newJob(e, d, now)
	j.RunnerName, j.StartedAt = w.RunnerName, w.StartedAt
	switch e.ev.Action {
	case webhook.ActionInProgress:
		j.Status = domain.JobRunning
		if j.StartedAt.IsZero() {
			j.StartedAt = now
		}
	case webhook.ActionCompleted:
		j.Status, j.CompletedAt, j.Conclusion = domain.JobCompleted, w.CompletedAt, w.Conclusion
		if j.CompletedAt.IsZero() {
			j.CompletedAt = now
		}
	default:
		return nil
	}
	created, err := in.Store.CreateJobs(ctx, []domain.Job{j})
	if err != nil {
		return fmt.Errorf("record job %d, %s before queued: %w", w.ID, e.ev.Action, err)
	}
	if created[0] {
		in.Log.Info("job recorded from a delivery that came before its queued one",
			"job", w.ID, "action", e.ev.Action, "status", j.Status)
	}
	return nil
}
