package reaper

import (
	"context"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// Store is what this package needs of the store; the embedded store and every other backend implement it.
type Store interface {
	jobs.Store
	DeleteInstances(ctx context.Context, ids []string) error
	DeleteJobs(ctx context.Context, before time.Time) (int, error)
	ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error)
	Transition(ctx context.Context, id string, g domain.Guard, fn func(*domain.Instance)) (domain.Instance, error)
	TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error)
}
