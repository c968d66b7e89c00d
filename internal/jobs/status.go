package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

const retries = 8

// verbs are the named transitions; none used here reads its deadlines.
var verbs domain.Lifecycle

// update reads job id, lets decide pick the verb (or none), and commits it
// guarded by the version read, retrying when another writer won.
func update(ctx context.Context, st Store, id int64, decide func(j domain.Job) (domain.JobTransitionRequest, bool)) (domain.Job, error) {
	for range retries {
		j, err := st.GetJob(ctx, id)
		if err != nil {
			return domain.Job{}, err
		}
		r, ok := decide(j)
		if !ok {
			return j, nil
		}
		next, err := st.TransitionJob(ctx, id, r.Guard, r.Apply)
		if errors.Is(err, domain.ErrConflict) {
			continue
		}
		return next, err
	}
	return domain.Job{}, fmt.Errorf("job %d: still changing after %d attempts", id, retries)
}

// MarkRunning records that GitHub (or the agent) reports the job started.
// A job already running or final is left alone; an unknown job is not an
// error (it is not ours, or was never seen queued).
func MarkRunning(ctx context.Context, st Store, id int64, at time.Time, runnerName string) error {
	_, err := update(ctx, st, id, func(j domain.Job) (domain.JobTransitionRequest, bool) {
		return verbs.StartJob(j, at, runnerName), j.Status == domain.JobQueued || j.Status == domain.JobAssigned
	})
	if errors.Is(err, domain.ErrNotFound) {
		return nil
	}
	return err
}
