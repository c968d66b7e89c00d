package converger

import (
	"context"
	"errors"
	"fmt"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launch"
)

// cloudCalls is how one pool's cloud calls went in a cycle, so that a
// cycle in which the converger could not act on the cloud at all fails
// its loop step (see blindness). A pool is converged by one goroutine.
type cloudCalls struct {
	worked int   // calls that changed machines, or that the cloud answered about the pool
	failed error // the first call that failed for want of the cloud
}

// answered says whether err is the cloud's answer about what was asked
// rather than a failure to reach or use it: a capacity shortage is
// normal weather, an image the cloud does not know is the pool's to fix
// (its status and an ERROR say so), machines gone already are what a
// terminate asks for, and a call that names the machines the cloud refused
// went through for the others.
func answered(err error) bool {
	var refused *domain.RefusedInstancesError
	return errors.Is(err, domain.ErrInsufficientCapacity) || errors.Is(err, domain.ErrUnknownImage) ||
		errors.Is(err, domain.ErrUnknownInstance) || errors.As(err, &refused)
}

// note records a call that changes machines (create, stop, terminate).
func (cc *cloudCalls) note(err error) {
	switch {
	case err == nil || answered(err):
		cc.worked++
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// the cycle was cut short: not the cloud's doing
	default:
		cc.fail(err)
	}
}

// noteRead records a lookup every pool makes every cycle (its image): its
// failure counts, its success does not, or a pool with nothing to change
// would hide every other pool's failures.
func (cc *cloudCalls) noteRead(err error) {
	if err != nil && !answered(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		cc.fail(err)
	}
}

func (cc *cloudCalls) fail(err error) {
	if cc.failed == nil {
		cc.failed = err
	}
}

// blindness is the error of a cycle in which the converger could not act
// on the cloud: no pool got a cloud call through, and some call failed (a
// pool's, or the listing of every machine). Credentials refused, an
// outage or throttling on every call leave every pool failing while each
// cycle runs to its end: the error makes the loop count the cycle as
// failed, so that /healthz shows it. A cycle in which some pool's calls
// went through is not blind, nor is one whose only trouble was the
// cloud's answer about a pool (see answered). names are the pools of
// calls, in order.
func blindness(listErr error, names []string, calls []cloudCalls) error {
	var first error
	failed := 0
	for i, cc := range calls {
		if cc.worked > 0 {
			return nil
		}
		if cc.failed != nil {
			failed++
			if first == nil {
				first = fmt.Errorf("pool %s: %w", names[i], cc.failed)
			}
		}
	}
	switch {
	case failed > 0:
		return fmt.Errorf("no cloud call of the cycle went through (failed in %d of its pools): %w", failed, first)
	case listErr != nil:
		return fmt.Errorf("no cloud call of the cycle went through: list machines: %w", listErr)
	}
	return nil
}

// watchedCloud is the launcher's cloud, each call noted in calls.
type watchedCloud struct {
	launch.Cloud
	calls *cloudCalls
}

func (w watchedCloud) Create(ctx context.Context, spec domain.LaunchSpec) ([]domain.CloudInstance, error) {
	machines, err := w.Cloud.Create(ctx, spec)
	w.calls.note(err)
	return machines, err
}

func (w watchedCloud) Terminate(ctx context.Context, ids []string) error {
	err := w.Cloud.Terminate(ctx, ids)
	w.calls.note(err)
	return err
}
