package api

import (
	"context"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Store is what this package needs of the store; the embedded store and every other backend implement it.
type Store interface {
	GetJob(ctx context.Context, id int64) (domain.Job, error)
	GetInstance(ctx context.Context, id string) (domain.Instance, error)
	ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error)
	ListJobs(ctx context.Context, f domain.JobFilter) ([]domain.Job, error)
	ListPoolStatus(ctx context.Context) ([]domain.PoolStatus, error)
}
