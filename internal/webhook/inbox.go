package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Enqueue puts a workflow_job delivery that needs no signature (one this
// process made: the simulated GitHub's, or the reaper's for a job no webhook
// announced) in the inbox exactly as the handler puts a verified one: it is
// validated, and deduplicated by its delivery id. Other actions than the
// handled ones are dropped, as the handler drops them.
func Enqueue(ctx context.Context, q domain.Queue, receivedAt time.Time, deliveryID string, payload []byte) error {
	if !validDeliveryID(deliveryID) {
		return fmt.Errorf("delivery id %q: %w", clip(deliveryID), ErrInvalidDelivery)
	}
	ev, err := ParseWorkflowJob(payload)
	if err != nil {
		if errors.Is(err, ErrUnhandledAction) {
			return nil
		}
		return fmt.Errorf("delivery %s: %w", deliveryID, err)
	}
	env, err := inboxMessage(deliveryID, receivedAt, ev)
	if err != nil {
		return fmt.Errorf("delivery %s: %w", deliveryID, err)
	}
	return q.Send(ctx, domain.QueueInbox, []domain.SendRequest{{Body: env, DedupID: deliveryID}})
}

// QueuedPayload is the workflow_job payload GitHub would have sent when job
// was queued: what the reaper admits for a job GitHub lists as queued but no
// webhook announced. A job without its creation time is dated at now.
func QueuedPayload(job domain.GitHubJob, now time.Time) []byte {
	created := job.CreatedAt
	if created.IsZero() {
		created = now
	}
	labels := job.Labels
	if labels == nil {
		labels = []string{}
	}
	return compactPayload(WorkflowJobEvent{Action: ActionQueued, Repo: job.Repo, Job: WorkflowJob{
		ID: job.ID, RunID: job.RunID, RunAttempt: max(job.RunAttempt, 1), Name: job.Name, WorkflowName: job.Workflow,
		Status: ActionQueued, Labels: labels, CreatedAt: created.UTC().Truncate(time.Second),
	}})
}
