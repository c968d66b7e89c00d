package reaper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// strandedAfter is how long a job must have been left unchanged, and its
// instance ended, before GitHub is asked about it: until then its
// completed webhook is more likely on its way than lost.
const strandedAfter = 5 * time.Minute

// strandedPerCycle bounds the GitHub calls a cycle spends on stranded jobs;
// such jobs are rare, and the rest wait for the next cycles. It is one of a
// cycle's three shares of job look-ups (see silentPerCycle).
const strandedPerCycle = 20

// strandedJobs settles assigned and running jobs whose instance has ended
// (its row terminated or deleted) while the job stayed open: the completed
// webhook that ends a job was lost, and nothing else would ever end it, so
// it would count as running (and as demand of its pool) for good. GitHub is
// asked about each, at most strandedPerCycle a cycle, those asked least
// lately first and then the oldest, so that jobs GitHub keeps reporting in
// progress do not starve the others. A job GitHub reports completed is
// completed with GitHub's conclusion; one GitHub no longer has, or about
// which it gave no answer within the running allowance, is given up:
// completed without a conclusion, with a reason. One GitHub reports queued
// or in progress is left: GitHub fails a job whose runner died, and a
// queued one goes back to its queue when queuedJobs lists it. Only the
// store's errors fail the step; GitHub's are logged, and asked again. It
// picks its jobs from open, the cycle's listing of the jobs not over.
func (r *Reconciler) strandedJobs(ctx context.Context, rows []domain.Instance, open []domain.Job) (completed, abandoned int, err error) {
	listed, now := byID(rows), r.Clock.Now()
	var errs []error
	var stranded []domain.Job
	for _, j := range open {
		if (j.Status != domain.JobAssigned && j.Status != domain.JobRunning) || j.InstanceID == "" || now.Sub(j.UpdatedAt) < strandedAfter {
			continue
		}
		ended, err := r.instanceEnded(ctx, j.InstanceID, listed, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ended {
			stranded = append(stranded, j)
		}
	}
	r.asked = r.asked.keep(stranded)
	completed, abandoned, err = settleEach(r.asked.inTurn(stranded, openSince, strandedPerCycle), func(j domain.Job) (bool, bool, error) {
		return r.settle(ctx, j, now)
	})
	return completed, abandoned, errors.Join(append(errs, err)...)
}

// instanceEnded reports whether instance id has ended strandedAfter ago at
// least: terminated that long, or its row deleted.
func (r *Reconciler) instanceEnded(ctx context.Context, id string, listed map[string]domain.Instance, now time.Time) (bool, error) {
	in, found, err := r.instanceRow(ctx, id, listed)
	if err != nil {
		return false, err
	}
	if !found {
		return true, nil
	}
	return in.State == domain.StateTerminated && now.Sub(in.StateSince) >= strandedAfter, nil
}

// instanceRow returns instance id's row, found false when it was deleted.
// A row not in the cycle's listing is looked up, for it may be newer than
// the listing.
func (r *Reconciler) instanceRow(ctx context.Context, id string, listed map[string]domain.Instance) (in domain.Instance, found bool, err error) {
	if in, ok := listed[id]; ok {
		return in, true, nil
	}
	in, err = r.Store.GetInstance(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Instance{}, false, nil
	}
	if err != nil {
		return domain.Instance{}, false, fmt.Errorf("read instance %s: %w", id, err)
	}
	return in, true, nil
}

// openSince is when a job began to be served: started, else assigned,
// else recorded.
func openSince(j domain.Job) time.Time {
	switch {
	case !j.StartedAt.IsZero():
		return j.StartedAt
	case !j.AssignedAt.IsZero():
		return j.AssignedAt
	}
	return j.CreatedAt
}

// settle asks GitHub about one stranded job and ends it when GitHub says
// it ended (done), or gives it up (gaveUp). The change is guarded on the
// job as read: a webhook that came meanwhile wins. err is the store's.
func (r *Reconciler) settle(ctx context.Context, j domain.Job, now time.Time) (done, gaveUp bool, err error) {
	g, gerr := r.GitHub.GetJob(ctx, j.Repo, j.ID)
	r.asked[j.ID] = now
	overdue := now.Sub(openSince(j)) >= r.RunningAllowance
	switch {
	case errors.Is(gerr, domain.ErrNotFound):
		why := "its instance ended and GitHub no longer has it"
		ok, err := r.complete(ctx, j, now, "", why)
		if ok {
			r.Log.Warn("job given up: "+why, "job", j.ID, "repo", j.Repo, "status", j.Status, "instance", j.InstanceID)
		}
		return false, ok, err
	case gerr != nil && overdue:
		why := fmt.Sprintf("its instance ended and GitHub gave no answer about it within %s", r.RunningAllowance)
		ok, err := r.complete(ctx, j, now, "", why)
		if ok {
			r.Log.Warn("job given up: "+why, "job", j.ID, "repo", j.Repo, "status", j.Status, "instance", j.InstanceID, "err", gerr)
		}
		return false, ok, err
	case gerr != nil:
		r.Log.Warn("could not ask GitHub about a job whose instance ended; asking again later", "job", j.ID, "repo", j.Repo, "err", gerr)
		return false, false, nil
	case g.Status != githubCompleted:
		return false, false, nil // GitHub has not ended it yet
	}
	ok, err := r.complete(ctx, j, now, g.Conclusion, "")
	if ok {
		r.Log.Info("job completed as GitHub reports it; its completed webhook never came", "job", j.ID, "repo", j.Repo,
			"conclusion", g.Conclusion, "instance", j.InstanceID)
	}
	return ok, false, err
}

// complete records j's end, with conclusion and, when given, why bullpen
// ended it. ok is false when j changed since it was read.
func (r *Reconciler) complete(ctx context.Context, j domain.Job, at time.Time, conclusion, why string) (bool, error) {
	c := completion(j, at, conclusion, why)
	_, err := r.Store.TransitionJob(ctx, c.ID, c.Guard, c.Apply)
	switch {
	case err == nil:
		delete(r.asked, j.ID)
		return true, nil
	case errors.Is(err, domain.ErrConflict), errors.Is(err, domain.ErrNotFound):
		return false, nil // it moved on: next cycle looks again
	}
	return false, fmt.Errorf("complete stranded job %d: %w", j.ID, err)
}
