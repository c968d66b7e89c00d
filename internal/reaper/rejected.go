package reaper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// DefaultRejectedGrace is Options.RejectedGrace's default. A job is
// rejected on the configuration in force at the replica whose intake took
// its webhook; a pool just added to the settings file reaches every
// replica within a reload (30 s by default), and the reaper looks at the
// job on its next cycle (1 min) after that. Two minutes cover both, so a
// job the next reload serves is readmitted, not its run cancelled.
const DefaultRejectedGrace = 2 * time.Minute

// maxReadmissions is how often one job is readmitted before it is taken
// as not served whatever the configuration says. Routing a job is not the
// whole of serving it: a launch the cloud refuses (an image that does not
// resolve) rejects it again, and readmitting it for ever would only repeat
// that, and keep its run from being cancelled.
const maxReadmissions = 3

// readmissionMemory is how long a readmission is remembered: GitHub drops
// a job still queued after 24 hours.
const readmissionMemory = 24 * time.Hour

// readmission is how often a job was readmitted, and when last.
type readmission struct {
	times int
	last  time.Time
}

// runKey names a workflow run; repositories compare without case.
type runKey struct {
	repo string
	id   int64
}

// rejectedStillQueued deals with a rejected job GitHub still holds queued.
// When the configuration in force serves its labels it is readmitted: its
// row goes back to queued, and a queued delivery of it to the inbox, for
// the intake to route. A job readmitted before and rejected again is
// readmitted again only once its new rejection is RejectedGrace old (every
// replica has reloaded by then), and at most maxReadmissions times.
// Otherwise, with CancelRejected, its run is cancelled once it has been
// rejected for RejectedGrace: each run once a cycle (runs holds those
// cancelled), however many of its jobs were rejected.
func (r *Reconciler) rejectedStillQueued(ctx context.Context, gj domain.GitHubJob, j domain.Job, runs map[runKey]bool, rep *Report) (ghErr, err error) {
	now := r.Clock.Now()
	rejectedFor := now.Sub(j.UpdatedAt)
	before, again := r.readmitted[j.ID]
	served := r.Takes != nil && r.Takes(gj.Labels) && before.times < maxReadmissions
	switch {
	case served && (!again || rejectedFor >= r.RejectedGrace):
		return nil, r.readmit(ctx, gj, j, rep)
	case served, !r.CancelRejected, rejectedFor < r.RejectedGrace:
		return nil, nil
	}
	run := runKey{strings.ToLower(j.Repo), j.RunID}
	if runs[run] {
		return nil, nil
	}
	runs[run] = true
	r.Log.Info("rejected job still queued on GitHub; cancelling its run", "job", j.ID, "repo", j.Repo, "run", j.RunID, "reason", j.Reason)
	err = r.GitHub.CancelRun(ctx, j.Repo, j.RunID)
	if errors.Is(err, domain.ErrNotFound) {
		return nil, nil // the run was deleted: nothing is left to cancel
	}
	if err != nil {
		return fmt.Errorf("cancel the run of rejected job %d: %w", j.ID, err), nil
	}
	rep.Cancelled++
	return nil, nil
}

// readmit sends a rejected job back to the intake. A job another reaper
// readmitted, or that changed, meanwhile is left to the next cycle.
func (r *Reconciler) readmit(ctx context.Context, gj domain.GitHubJob, j domain.Job, rep *Report) error {
	req := domain.Lifecycle{}.Readmit(j)
	next, err := r.Store.TransitionJob(ctx, req.ID, req.Guard, req.Apply)
	if errors.Is(err, domain.ErrConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("readmit rejected job %d: %w", j.ID, err)
	}
	now := r.Clock.Now()
	r.readmitted[j.ID] = readmission{times: r.readmitted[j.ID].times + 1, last: now}
	rep.Readmitted++
	r.Log.Info("a job rejected under an earlier configuration is served now", "job", j.ID, "repo", j.Repo, "reason", j.Reason)
	return r.deliverReadmitted(ctx, gj, next)
}

// deliverReadmitted puts a synthetic queued delivery of a readmitted job in
// the inbox, as admit does for a job no webhook announced, so that the
// intake routes it. Its delivery id names the readmission (the job's
// version) and the time, so that the inbox drops it neither as the
// duplicate of an earlier delivery of the job nor as that of a delivery of
// this readmission that was lost; should two of them reach the intake, the
// second finds the job routed, and its send is deduplicated.
func (r *Reconciler) deliverReadmitted(ctx context.Context, gj domain.GitHubJob, j domain.Job) error {
	now := r.Clock.Now()
	id := fmt.Sprintf("readmit-%d-%d-%d", j.ID, j.Version, now.Unix())
	if err := webhook.Enqueue(ctx, r.Queue, now, id, webhook.QueuedPayload(gj, now)); err != nil {
		return fmt.Errorf("deliver readmitted job %d: %w", j.ID, err)
	}
	return nil
}

// forgetReadmissions drops the readmissions older than GitHub keeps a job
// queued.
func (r *Reconciler) forgetReadmissions(now time.Time) {
	for id, a := range r.readmitted {
		if now.Sub(a.last) >= readmissionMemory {
			delete(r.readmitted, id)
		}
	}
}
