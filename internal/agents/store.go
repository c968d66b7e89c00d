package agents

import (
	"context"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// Store is what this package needs of the store; the embedded store and every other backend implement it.
type Store interface {
	jobs.Store
	ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error)
	RecordHeartbeat(ctx context.Context, id string, at time.Time) error
	RecordHeartbeats(ctx context.Context, beats []domain.Heartbeat) error
	Transition(ctx context.Context, id string, g domain.Guard, fn func(*domain.Instance)) (domain.Instance, error)
}
