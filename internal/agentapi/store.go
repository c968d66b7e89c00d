package agentapi

import (
	"context"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Store is what this package needs of the store; the embedded store and every other backend implement it.
type Store interface {
	GetInstance(ctx context.Context, id string) (domain.Instance, error)
	ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error)
	Transition(ctx context.Context, id string, g domain.Guard, fn func(*domain.Instance)) (domain.Instance, error)
}
