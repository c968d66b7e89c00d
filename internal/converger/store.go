package converger

import (
	"context"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launch"
)

// Store is what this package needs of the store; the embedded store and every other backend implement it.
type Store interface {
	launch.Store
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (domain.Lease, bool, error)
	ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error)
	PutPoolStatus(ctx context.Context, s domain.PoolStatus) error
	TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error)
}
