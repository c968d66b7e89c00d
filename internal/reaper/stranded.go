package reaper

import (
	"cmp"
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
// cycle's four shares of job look-ups (see silentPerCycle).
const strandedPerCycle = 20

// strandedJobs settles assigned and running jobs whose instance has ended
// (see endedAt) while the job stayed open: the completed webhook that ends
// a job was lost, and nothing else would ever end it, so it would count as
// running (and as demand of its pool) for good. GitHub is
// asked about each, at most strandedPerCycle a cycle, those asked least
// lately first and then the oldest, so that jobs GitHub keeps reporting in
// progress do not starve the others. A job GitHub reports completed is
// completed with GitHub's conclusion; one GitHub no longer has, or about
// which it gave no answer within the running allowance, is given up:
// completed without a conclusion, with a reason. One GitHub reports queued
// or in progress is left: GitHub fails a job whose runner died, and a
// queued one goes back to its queue when queuedJobs lists it. A job that
// is settled while its instance's row is still out of service but not
// terminating (in error, or stuck booting or claimed) retires that
// instance in the same change. Only the store's errors fail the step;
// GitHub's are logged, and asked again. It picks its jobs from open, the
// cycle's listing of the jobs not over.
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
// least (see endedAt), or its row was deleted.
func (r *Reconciler) instanceEnded(ctx context.Context, id string, listed map[string]domain.Instance, now time.Time) (bool, error) {
	in, found, err := r.instanceRow(ctx, id, listed)
	if err != nil {
		return false, err
	}
	if !found {
		return true, nil
	}
	at, ended := endedAt(in)
	return ended && now.Sub(at) >= strandedAfter, nil
}

// endedAt says whether in can no longer be serving a job, and since when.
// A terminated row ended when it was closed. A row in error ended when its
// agent reported the failure: its runner is gone, and a job that had
// started stays bound to it until the row expires. A row booting or
// claimed whose job started (GitHub saw its runner take it) and that is
// past its deadline ended then: its agent would have reported the runner
// registered by then, and a hung agent reports nothing, so the row would
// otherwise hold the job, running as far as bullpen knows, until its
// backstop (see Terminator.expiresAt).
func endedAt(in domain.Instance) (time.Time, bool) {
	switch in.State {
	case domain.StateTerminated, domain.StateError:
		return in.StateSince, true
	case domain.StateBooting, domain.StateClaimed:
		if in.JobStarted && !in.Deadline.IsZero() {
			return in.Deadline, true
		}
	}
	return time.Time{}, false
}

// endedBy reports whether in has ended at now (see endedAt).
func endedBy(in domain.Instance, now time.Time) bool {
	at, ended := endedAt(in)
	return ended && !now.Before(at)
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
		ok, err := r.complete(ctx, j, now, "", why, "GitHub no longer has its job")
		if ok {
			r.Log.Warn("job given up: "+why, "job", j.ID, "repo", j.Repo, "status", j.Status, "instance", j.InstanceID)
		}
		return false, ok, err
	case gerr != nil && overdue:
		why := fmt.Sprintf("its instance ended and GitHub gave no answer about it within %s", r.RunningAllowance)
		ok, err := r.complete(ctx, j, now, "", why, fmt.Sprintf("its job was given up: GitHub gave no answer about it within %s", r.RunningAllowance))
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
	ok, err := r.complete(ctx, j, now, g.Conclusion, "", fmt.Sprintf("GitHub reports its job completed (%s)", cmp.Or(g.Conclusion, "no conclusion")))
	if ok {
		r.Log.Info("job completed as GitHub reports it; its completed webhook never came", "job", j.ID, "repo", j.Repo,
			"conclusion", g.Conclusion, "instance", j.InstanceID)
	}
	return ok, false, err
}

// complete records j's end, with conclusion and, when given, why bullpen
// ended it. An instance that holds the job although it ended (see endedAt)
// and is not on its way out yet is retired in the same change, for retire:
// nothing else would end a row stuck booting or claimed before its
// backstop. ok is false when j or its instance changed since they were
// read, or the instance serves again: the next cycle looks again.
func (r *Reconciler) complete(ctx context.Context, j domain.Job, at time.Time, conclusion, why, retire string) (bool, error) {
	change := domain.Change{Jobs: []domain.JobTransitionRequest{completion(j, at, conclusion, why)}}
	in, err := r.Store.GetInstance(ctx, j.InstanceID)
	switch {
	case errors.Is(err, domain.ErrNotFound):
	case err != nil:
		return false, fmt.Errorf("complete stranded job %d: read instance %s: %w", j.ID, j.InstanceID, err)
	case in.State == domain.StateTerminating || in.State.Terminal():
	case !endedBy(in, at):
		return false, nil
	default:
		change.Instances = []domain.TransitionRequest{
			domain.Lifecycle{}.Retire(in, domain.StateTerminating, retire, at.Add(r.TerminatingAllowance)),
		}
	}
	_, err = r.Store.Commit(ctx, change)
	switch {
	case err == nil:
		delete(r.asked, j.ID)
		if len(change.Instances) > 0 {
			r.Log.Warn("instance that can no longer serve held a job now over; terminating it", "instance", in.ID, "state", in.State,
				"job", j.ID, "reason", retire)
		}
		return true, nil
	case errors.Is(err, domain.ErrConflict), errors.Is(err, domain.ErrNotFound):
		return false, nil // it moved on: next cycle looks again
	}
	return false, fmt.Errorf("complete stranded job %d: %w", j.ID, err)
}
