package intake

import (
	"context"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// Store is what this package needs of the store; the embedded store and every other backend implement it.
type Store interface {
	jobs.Store
	CreateJobs(ctx context.Context, jobs []domain.Job) ([]bool, error)
	Transition(ctx context.Context, id string, g domain.Guard, fn func(*domain.Instance)) (domain.Instance, error)
}
