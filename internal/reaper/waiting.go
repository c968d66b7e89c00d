package reaper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// waitingAfter is how long a job must have waited for a runner before
// GitHub is asked whether it still does, and how long an answer about it
// (a look-up, or GitHub listing it queued) holds before it is asked again:
// a job usually waits far less, and a completed webhook lost for it is then
// more likely than one still on its way.
const waitingAfter = 10 * time.Minute

// waitingPerCycle bounds the GitHub calls a cycle spends on waiting jobs:
// however many wait, they cost at most that many calls a cycle, and each
// at most one call every waitingAfter (none while GitHub lists it queued).
// It is one of a cycle's four shares of job look-ups (see silentPerCycle).
const waitingPerCycle = 10

// endedWaits settles jobs bullpen holds as waiting for a runner (queued,
// or assigned to an instance that has not ended and whose runner has not
// taken them) that GitHub has ended meanwhile: cancelled before they
// started (by a run's concurrency group, or by a person) and their
// completed webhook lost, which GitHub does not send again. Nothing else
// would end such a job: GitHub no longer lists it queued, and the expiry
// of the instance holding it sends it back to its queue, where the next
// instance holds it as long, for good, counting as demand and as the
// oldest wait all along. A job that has waited waitingAfter at least, and
// that GitHub was neither asked about nor listed queued within
// waitingAfter, is looked up, at most waitingPerCycle a cycle, those looked up least lately
// first and then the oldest, so that each is looked up in turn. A job
// GitHub reports completed is completed with GitHub's conclusion; one
// GitHub no longer has is given up, completed without a conclusion and with
// a reason. In the same change the instance holding it, whose runner waits
// for it, is retired. A job held for an approval waits for a person, not a
// runner, and is never looked up. Only the store's errors fail the step;
// GitHub's are logged, and the job is looked up again later.
func (r *Reconciler) endedWaits(ctx context.Context, rows []domain.Instance, open []domain.Job) (completed, abandoned int, err error) {
	listed, now := byID(rows), r.Clock.Now()
	var errs []error
	var waiting []domain.Job
	for _, j := range open {
		if _, ok := waitStart(j); !ok {
			continue
		}
		if j.Status == domain.JobAssigned && j.InstanceID != "" {
			in, found, err := r.instanceRow(ctx, j.InstanceID, listed)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !found || endedBy(in, now) {
				continue // strandedJobs settles it
			}
		}
		waiting = append(waiting, j)
	}
	r.waitAnswered = r.waitAnswered.keep(waiting)
	var due []domain.Job
	for _, j := range waiting {
		since, _ := waitStart(j)
		if now.Sub(since) >= waitingAfter && now.Sub(r.waitAnswered[j.ID]) >= waitingAfter {
			due = append(due, j)
		}
	}
	since := func(j domain.Job) time.Time { s, _ := waitStart(j); return s }
	completed, abandoned, err = settleEach(r.waitAnswered.inTurn(due, since, waitingPerCycle), func(j domain.Job) (bool, bool, error) {
		return r.endWait(ctx, j, now)
	})
	return completed, abandoned, errors.Join(append(errs, err)...)
}

// waitStart says whether j waits for a runner as far as the store knows,
// and since when: from GitHub queuing it, or from its record when that is
// later or GitHub's time is not known (bullpen cannot have served a job it
// had not heard of: a job queued an hour before its late webhook came has
// waited for bullpen no longer than since then). A job held for an
// approval does not wait for a runner.
func waitStart(j domain.Job) (time.Time, bool) {
	if since, ok := j.WaitingSince(); ok {
		return maxTime(since, j.CreatedAt), true
	}
	if j.HeldForApproval() || !j.StartedAt.IsZero() || (j.Status != domain.JobQueued && j.Status != domain.JobAssigned) {
		return time.Time{}, false
	}
	return j.CreatedAt, true
}

// sawQueued notes that GitHub listed job id queued: it is not looked up
// again before waitingAfter.
func (r *Reconciler) sawQueued(id int64) { r.waitAnswered[id] = r.Clock.Now() }

// endWait looks up one waiting job on GitHub and ends it when GitHub says
// it ended (done), or gives it up when GitHub no longer has it (gaveUp).
// err is the store's.
func (r *Reconciler) endWait(ctx context.Context, j domain.Job, now time.Time) (done, gaveUp bool, err error) {
	g, gerr := r.GitHub.GetJob(ctx, j.Repo, j.ID)
	r.waitAnswered[j.ID] = now
	switch {
	case errors.Is(gerr, domain.ErrNotFound):
		why := "it waited for a runner and GitHub no longer has it"
		ok, err := r.completeWaiting(ctx, j, now, "", why, "GitHub no longer has its job")
		if ok {
			r.Log.Warn("job given up: "+why, "job", j.ID, "repo", j.Repo, "status", j.Status, "instance", j.InstanceID)
		}
		return false, ok, err
	case gerr != nil:
		r.Log.Warn("could not ask GitHub about a job waiting for a runner; asking again later", "job", j.ID, "repo", j.Repo, "err", gerr)
		return false, false, nil
	case g.Status != githubCompleted:
		return false, false, nil // GitHub has it still: it waits, or its in_progress webhook is on its way
	}
	ok, err := r.completeWaiting(ctx, j, now, g.Conclusion, "", "its job ended on GitHub before it started")
	if ok {
		r.Log.Info("job completed as GitHub reports it; it ended before it started and its completed webhook never came", "job", j.ID, "repo", j.Repo,
			"status", j.Status, "conclusion", g.Conclusion, "instance", j.InstanceID)
	}
	return ok, false, err
}

// completeWaiting records the end of waiting job j, with conclusion and,
// when given, why bullpen ended it, and in the same change retires the
// instance holding it, for retire, while its runner has taken no job: that
// runner would otherwise wait until the instance's deadline for a job that
// never comes. An instance whose agent reported its runner busy is left to
// that agent's report, since the runner may have taken another job with
// the same labels. ok is false when j or its instance changed since they
// were read: the next cycle looks again.
func (r *Reconciler) completeWaiting(ctx context.Context, j domain.Job, at time.Time, conclusion, why, retire string) (bool, error) {
	change := domain.Change{Jobs: []domain.JobTransitionRequest{completion(j, at, conclusion, why)}}
	if j.Status == domain.JobAssigned && j.InstanceID != "" {
		in, err := r.Store.GetInstance(ctx, j.InstanceID)
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			return false, fmt.Errorf("complete waiting job %d: read instance %s: %w", j.ID, j.InstanceID, err)
		}
		if err == nil && in.Job == j.Key() && !in.JobStarted && jobs.ServesJob(in.State) {
			change.Instances = []domain.TransitionRequest{
				domain.Lifecycle{}.Retire(in, domain.StateTerminating, retire, at.Add(r.TerminatingAllowance)),
			}
		}
	}
	_, err := r.Store.Commit(ctx, change)
	switch {
	case err == nil:
		delete(r.waitAnswered, j.ID)
		return true, nil
	case errors.Is(err, domain.ErrConflict), errors.Is(err, domain.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("complete waiting job %d: %w", j.ID, err)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
