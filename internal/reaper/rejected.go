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
// that, and keep its run from being cancelled. The count is the job's
// (Job.Readmissions), so a restart or another replica taking the lease
// goes on from it.
const maxReadmissions = 3

// queuedAtMost is how long GitHub holds a job queued before it drops it:
// a job bullpen recorded, or last changed, longer ago than that is not
// looked up.
const queuedAtMost = 24 * time.Hour

// rejectedPerCycle bounds the GitHub look-ups a cycle spends on rejected
// jobs, and readmitted ones not routed yet, that the scopes it looked at
// did not list: the scopes rotate, and with many repositories a job's
// would come round only every tens of minutes, or, for a repository whose
// queued jobs are more than one listing holds, never. It is one of a
// cycle's shares of job look-ups (see silentPerCycle). The runs cancelled
// come on top, one call each.
const rejectedPerCycle = 20

// rejectedPage is how many rejected jobs one read of the store lists.
const rejectedPage = 200

// runKey names a workflow run; repositories compare without case.
type runKey struct {
	repo string
	id   int64
}

func runOf(j domain.Job) runKey { return runKey{strings.ToLower(j.Repo), j.RunID} }

// rejectedCycle is what one cycle's scope listings and its look-ups of
// rejected jobs share, so that no job is acted on twice in a cycle: the
// jobs either dealt with, and the runs cancelled.
type rejectedCycle struct {
	seen map[int64]bool
	runs map[runKey]bool
}

func newRejectedCycle() *rejectedCycle {
	return &rejectedCycle{seen: map[int64]bool{}, runs: map[runKey]bool{}}
}

// rejectedAction is what is due for a rejected job GitHub holds queued.
type rejectedAction int

const (
	leaveRejected rejectedAction = iota
	readmitRejected
	cancelRejected
)

// decide says what is due for rejected job j, with these labels, at now.
// When the configuration in force routes its labels it is readmitted; a
// job readmitted before and rejected again is readmitted again only once
// its new rejection is RejectedGrace old (every replica has reloaded by
// then), and at most maxReadmissions times. Otherwise, with
// CancelRejected, its run is cancelled once it has been rejected for
// RejectedGrace. The grace counts from the job's last change, which for a
// rejected job is its rejection.
func (r *Reconciler) decide(j domain.Job, labels []string, now time.Time) rejectedAction {
	rejectedFor := now.Sub(j.UpdatedAt)
	served := r.Takes != nil && r.Takes(labels) && j.Readmissions < maxReadmissions
	switch {
	case served && (j.Readmissions == 0 || rejectedFor >= r.RejectedGrace):
		return readmitRejected
	case served, !r.CancelRejected, rejectedFor < r.RejectedGrace:
		return leaveRejected
	}
	return cancelRejected
}

// rejectedStillQueued deals with a rejected job GitHub still holds queued,
// as decide says: readmitted (its row back to queued, and a queued
// delivery of it to the inbox, for the intake to route), its run
// cancelled (each run once a cycle, however many of its jobs were
// rejected), or left as it is.
func (r *Reconciler) rejectedStillQueued(ctx context.Context, gj domain.GitHubJob, j domain.Job, cyc *rejectedCycle, rep *Report) (ghErr, err error) {
	cyc.seen[j.ID] = true
	switch r.decide(j, gj.Labels, r.Clock.Now()) {
	case readmitRejected:
		return nil, r.readmit(ctx, gj, j, rep)
	case leaveRejected:
		return nil, nil
	}
	run := runOf(j)
	if cyc.runs[run] {
		return nil, nil
	}
	cyc.runs[run] = true
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
	rep.Readmitted++
	// The configuration need not have changed: a job the cloud refused is
	// routed all the same, and is readmitted while its readmissions last.
	r.Log.Info("readmitted: the configuration in force routes it", "job", j.ID, "repo", j.Repo, "reason", j.Reason,
		"readmissions", next.Readmissions)
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

// undelivered reports whether j was readmitted a cycle ago at least and
// is still not routed: its delivery was lost (the inbox refused it, or it
// was dead-lettered).
func (r *Reconciler) undelivered(j domain.Job, now time.Time) bool {
	return j.Unrouted() && j.InstanceID == "" && now.Sub(j.UpdatedAt) >= r.Interval
}

// rejectedJobs looks up on GitHub the rejected jobs, and the readmitted
// ones left undelivered, that this cycle's scopes did not list, so that
// readmitting them and cancelling their runs does not wait for the scopes'
// rotation to reach their repository. Only a job for which something is
// due were GitHub to hold it queued is looked up (a job neither routed
// now nor to be cancelled costs no call), at most rejectedPerCycle a
// cycle, those looked up least lately first, then the oldest rejection. A
// job GitHub has ended is not looked up again. Only the store's and the
// queue's errors fail the step; GitHub's are logged, and the job is looked
// up again later.
func (r *Reconciler) rejectedJobs(ctx context.Context, open []domain.Job, cyc *rejectedCycle, rep *Report) error {
	now := r.Clock.Now()
	rejected, err := r.recentlyRejected(ctx, now)
	if err != nil {
		return err
	}
	var due, known []domain.Job
	for _, j := range rejected {
		known = append(known, j)
		if !cyc.seen[j.ID] && !r.notQueued[j.ID] && r.decide(j, j.Labels, now) != leaveRejected {
			due = append(due, j)
		}
	}
	for _, j := range open {
		if !r.undelivered(j, now) || now.Sub(j.UpdatedAt) >= queuedAtMost {
			continue
		}
		known = append(known, j)
		if !cyc.seen[j.ID] && !r.notQueued[j.ID] {
			due = append(due, j)
		}
	}
	r.forgetEnded(known)
	r.rejectedAsked = r.rejectedAsked.keep(due)
	var errs []error
	for _, j := range r.rejectedAsked.inTurn(due, func(j domain.Job) time.Time { return j.UpdatedAt }, rejectedPerCycle) {
		if j.Status == domain.JobRejected && cyc.runs[runOf(j)] {
			continue // its run was cancelled this cycle
		}
		errs = append(errs, r.lookUpRejected(ctx, j, now, cyc, rep))
	}
	return errors.Join(errs...)
}

// lookUpRejected asks GitHub about one rejected or undelivered job and, if
// GitHub still holds it queued, acts on it as a scope listing it would.
func (r *Reconciler) lookUpRejected(ctx context.Context, j domain.Job, now time.Time, cyc *rejectedCycle, rep *Report) error {
	g, gerr := r.GitHub.GetJob(ctx, j.Repo, j.ID)
	r.rejectedAsked[j.ID] = now
	switch {
	case errors.Is(gerr, domain.ErrNotFound):
		r.notQueued[j.ID] = true
		return nil
	case gerr != nil:
		r.Log.Warn("could not ask GitHub about a rejected or readmitted job; asking again later", "job", j.ID, "repo", j.Repo, "err", gerr)
		return nil
	case g.Status == githubCompleted:
		r.notQueued[j.ID] = true // a re-run is a job of its own
		return nil
	case g.Status != githubQueued:
		return nil
	}
	if j.Status != domain.JobRejected {
		cyc.seen[j.ID] = true
		return r.deliverReadmitted(ctx, g, j)
	}
	ghErr, err := r.rejectedStillQueued(ctx, g, j, cyc, rep)
	if ghErr != nil {
		r.Log.Warn("could not cancel the run of a rejected job; trying again later", "job", j.ID, "repo", j.Repo, "run", j.RunID, "err", ghErr)
	}
	return err
}

// recentlyRejected lists the rejected jobs recorded and last changed
// within queuedAtMost: GitHub holds none of the others queued. It reads
// the newest first, page by page, and stops at the first job recorded
// before that.
func (r *Reconciler) recentlyRejected(ctx context.Context, now time.Time) ([]domain.Job, error) {
	since := now.Add(-queuedAtMost)
	var out []domain.Job
	var after *domain.ListPosition[int64]
	for {
		page, err := r.Store.ListJobs(ctx, domain.JobFilter{Statuses: []domain.JobStatus{domain.JobRejected}, Newest: true,
			Limit: rejectedPage, After: after})
		if err != nil {
			return nil, fmt.Errorf("list rejected jobs: %w", err)
		}
		for _, j := range page {
			if j.CreatedAt.Before(since) {
				return out, nil
			}
			if !j.UpdatedAt.Before(since) {
				out = append(out, j)
			}
		}
		if len(page) < rejectedPage {
			return out, nil
		}
		last := page[len(page)-1].Position()
		after = &last
	}
}

// forgetEnded keeps, of the jobs GitHub was found to have ended, those
// still among known.
func (r *Reconciler) forgetEnded(known []domain.Job) {
	kept := make(map[int64]bool, len(r.notQueued))
	for _, j := range known {
		if r.notQueued[j.ID] {
			kept[j.ID] = true
		}
	}
	r.notQueued = kept
}
