package reaper

import (
	"context"
	"errors"
	"fmt"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// githubCompleted is the status GitHub gives a job that has ended.
const githubCompleted = "completed"

// githubQueued is the status GitHub gives a job waiting for a runner.
const githubQueued = "queued"

// rerunInterrupted asks GitHub to re-run each job whose spot machine was
// taken back after it started, when its runner's retry allows it, once its
// workflow run has completed: GitHub refuses before (ErrRunInProgress), so
// the job is asked for again each cycle until GitHub accepts. Each job is
// re-run at most once.
func (r *Reconciler) rerunInterrupted(ctx context.Context) (int, error) {
	if r.GitHub == nil {
		return 0, nil
	}
	waiting, err := r.Store.ListJobs(ctx, domain.JobFilter{ToRerun: true})
	if err != nil {
		return 0, fmt.Errorf("list jobs to re-run: %w", err)
	}
	now := r.Clock.Now()
	var errs []error
	done := 0
	for _, j := range waiting {
		if !j.AwaitsRerun(now) {
			continue
		}
		ok, err := r.rerun(ctx, j)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			done++
		}
	}
	return done, errors.Join(errs...)
}

// rerun asks GitHub to re-run job j, once j has ended on GitHub. A job
// the store has completed with GitHub's conclusion is asked for at once.
// Any other is looked up first: its completed webhook may be lost, or its
// agent reported it finished (an interrupted machine runs on until the
// notice's time, and a job may finish there) knowing only how its runner
// exited, and such a job may have succeeded. Until GitHub has it completed
// its run cannot have completed, and no request is spent on it; the
// conclusion GitHub gives a job the store completed without one is
// recorded, so that it is looked up once. The re-run is recorded before it
// is asked for, guarded on the job as read, so that of several reapers one
// asks, and a crash never makes it twice; a refusal takes the record back.
func (r *Reconciler) rerun(ctx context.Context, j domain.Job) (bool, error) {
	if j.Status != domain.JobCompleted || j.Conclusion == "" {
		g, err := r.GitHub.GetJob(ctx, j.Repo, j.ID)
		switch {
		case errors.Is(err, domain.ErrNotFound):
			// Asked for anyway: GitHub's answer settles it.
		case err != nil:
			return false, fmt.Errorf("status of interrupted job %d: %w", j.ID, err)
		case g.Status != githubCompleted:
			return false, nil // GitHub has not failed it yet
		default:
			concluded, ok, err := r.conclude(ctx, j, g.Conclusion)
			if !ok {
				return false, err
			}
			j = concluded
			if domain.RanToItsEnd(g.Conclusion) {
				return false, nil // it finished before its machine went: it must not run twice
			}
		}
	}
	mark := domain.Lifecycle{}.RerunJob(j)
	marked, err := r.Store.TransitionJob(ctx, j.ID, mark.Guard, mark.Apply)
	if errors.Is(err, domain.ErrConflict) || errors.Is(err, domain.ErrNotFound) {
		return false, nil // it moved on (another reaper has it): next cycle looks again
	}
	if err != nil {
		return false, fmt.Errorf("record the re-run of job %d: %w", j.ID, err)
	}
	err = r.GitHub.RerunJob(ctx, j.Repo, j.ID)
	switch {
	case err == nil:
		r.Log.Info("interrupted job re-run", "job", j.ID, "repo", j.Repo, "run", j.RunID, "name", j.Name)
		return true, nil
	case errors.Is(err, domain.ErrNotFound):
		// Nothing to re-run, ever: the record stays.
		r.Log.Warn("interrupted job not re-run: GitHub no longer has it", "job", j.ID, "repo", j.Repo)
		return false, nil
	}
	back := domain.Lifecycle{}.RerunRefused(marked)
	if _, berr := r.Store.TransitionJob(ctx, j.ID, back.Guard, back.Apply); berr != nil {
		// It stays recorded as re-run: at most once means never, here.
		return false, fmt.Errorf("re-run of job %d refused (%w), and its record stays: %w", j.ID, err, berr)
	}
	if errors.Is(err, domain.ErrRunInProgress) {
		return false, nil // its run has not completed: next cycle
	}
	return false, fmt.Errorf("re-run job %d: %w", j.ID, err)
}

// conclude records GitHub's conclusion on an interrupted job the store has
// completed without one, and returns the job as it then is; a job in any
// other state is returned as it is. ok is false when the job changed
// meanwhile (GitHub's completed webhook came, another reaper concluded it),
// for the next cycle to read again, or when the store failed (err).
func (r *Reconciler) conclude(ctx context.Context, j domain.Job, conclusion string) (_ domain.Job, ok bool, err error) {
	if j.Status != domain.JobCompleted || j.Conclusion != "" || conclusion == "" {
		return j, true, nil
	}
	c := domain.Lifecycle{}.ConcludeJob(j, conclusion)
	concluded, err := r.Store.TransitionJob(ctx, j.ID, c.Guard, c.Apply)
	switch {
	case errors.Is(err, domain.ErrConflict) || errors.Is(err, domain.ErrNotFound):
		return domain.Job{}, false, nil
	case err != nil:
		return domain.Job{}, false, fmt.Errorf("record GitHub's conclusion of interrupted job %d: %w", j.ID, err)
	}
	return concluded, true, nil
}
