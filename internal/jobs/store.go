package jobs

import (
	"context"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Store is what the shared job operations need of the store.
type Store interface {
	GetInstance(ctx context.Context, id string) (domain.Instance, error)
	GetJob(ctx context.Context, id int64) (domain.Job, error)
	ListJobs(ctx context.Context, f domain.JobFilter) ([]domain.Job, error)
	TransitionJob(ctx context.Context, id int64, g domain.JobGuard, fn func(*domain.Job)) (domain.Job, error)
	Commit(ctx context.Context, c domain.Change) (domain.Changed, error)
}
