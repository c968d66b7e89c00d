package provision

import (
	"context"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launch"
	"github.com/bullpen-ci/bullpen/internal/serving"
)

// Store is what this package needs of the store; the embedded store and every other backend implement it.
type Store interface {
	serving.Store
	launch.Store
	ListJobs(ctx context.Context, f domain.JobFilter) ([]domain.Job, error)
	ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error)
	Transition(ctx context.Context, id string, g domain.Guard, fn func(*domain.Instance)) (domain.Instance, error)
	TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error)
	TransitionJob(ctx context.Context, id int64, g domain.JobGuard, fn func(*domain.Job)) (domain.Job, error)
	TransitionJobs(ctx context.Context, reqs []domain.JobTransitionRequest) ([]domain.JobTransitionResult, error)
}
