package dispatch

import (
	"context"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/serving"
)

// Store is what this package needs of the store; the embedded store and every other backend implement it.
type Store interface {
	serving.Store
	ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error)
	ListJobs(ctx context.Context, f domain.JobFilter) ([]domain.Job, error)
	TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error)
	TransitionJobs(ctx context.Context, reqs []domain.JobTransitionRequest) ([]domain.JobTransitionResult, error)
}
