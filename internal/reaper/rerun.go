package reaper

import (
	"context"
	"errors"
	"fmt"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// rerunLookback is how many of the latest jobs are looked at for ones to
// re-run: an interrupted job is re-run within minutes of its run ending,
// long before a thousand newer jobs pass it.
const rerunLookback = 1000

// rerunInterrupted asks GitHub to re-run each job whose spot machine was
// taken back after it started, once its run has completed (GitHub refuses
// before), when its runner allows it; each is re-run once.
func (r *Reconciler) rerunInterrupted(ctx context.Context) (int, error) {
	if r.GitHub == nil {
		return 0, nil
	}
	recent, err := r.Store.ListJobs(ctx, domain.JobFilter{Limit: rerunLookback, Newest: true})
	if err != nil {
		return 0, fmt.Errorf("list jobs to re-run: %w", err)
	}
	var errs []error
	done := 0
	for _, j := range recent {
		if !j.Interrupted || j.Rerun || !j.Spec.RerunsInterrupted() {
			continue
		}
		err := r.GitHub.RerunJob(ctx, j.Repo, j.ID)
		switch {
		case errors.Is(err, domain.ErrRunInProgress):
			continue // its run has not completed yet: next cycle
		case err != nil:
			errs = append(errs, fmt.Errorf("re-run job %d: %w", j.ID, err))
			continue
		}
		mark := domain.Lifecycle{}.RerunJob(j)
		if _, err := r.Store.TransitionJob(ctx, j.ID, mark.Guard, mark.Apply); err != nil {
			// GitHub has it; a second request would make a second attempt.
			errs = append(errs, fmt.Errorf("record the re-run of job %d: %w", j.ID, err))
		}
		r.Log.Info("interrupted job re-run", "job", j.ID, "repo", j.Repo, "run", j.RunID)
		done++
	}
	return done, errors.Join(errs...)
}
