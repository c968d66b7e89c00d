package reaper

import (
	"context"
	"errors"
	"fmt"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// githubCompleted is the status GitHub gives a job that has ended.
const githubCompleted = "completed"

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

// rerun asks GitHub to re-run job j, once j has ended: its completed
// webhook said so, or (that webhook missed) GitHub does. Until then its run
// cannot have completed, and no request is spent on it. The re-run is
// recorded before it is asked for, guarded on the job as read, so that of
// several reapers one asks, and a crash never makes it twice; a refusal
// takes the record back.
func (r *Reconciler) rerun(ctx context.Context, j domain.Job) (bool, error) {
	if j.Status != domain.JobCompleted {
		g, err := r.GitHub.GetJob(ctx, j.Repo, j.ID)
		switch {
		case errors.Is(err, domain.ErrNotFound):
			// Asked for anyway: GitHub's answer settles it.
		case err != nil:
			return false, fmt.Errorf("status of interrupted job %d: %w", j.ID, err)
		case g.Status != githubCompleted:
			return false, nil // GitHub has not failed it yet
		case domain.RanToItsEnd(g.Conclusion):
			return false, nil // the notice came as it finished: it must not run twice
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
