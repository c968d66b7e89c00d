package agentapi

import (
	"context"
	"fmt"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/loop"
)

// changing are the states in which an instance's agent has news waiting:
// a job assigned (claimed, or booting for a job it was created for), a
// release, or its end (its token dies with it).
var changing = []domain.State{domain.StateBooting, domain.StateClaimed, domain.StateReleasing, domain.StateTerminating}

// RecheckLoop wakes, every WithRecheck interval, the long polls whose
// instance another replica assigned a job, released or ended. One listing of the
// instances in those few states serves every waiting agent of this
// replica, instead of one read per agent per interval. A woken poll reads
// its instance and answers, or waits again. Without WithRecheck it does
// nothing.
func (s *Server) RecheckLoop() loop.Loop {
	return loop.Loop{Name: "agent-recheck", Every: s.recheckEvery, Step: s.Recheck}
}

// Recheck is one step of RecheckLoop.
func (s *Server) Recheck(ctx context.Context) error {
	waiting := s.waiters.waiting()
	if len(waiting) == 0 || s.recheckEvery <= 0 {
		return nil
	}
	rows, err := s.store.ListInstances(ctx, domain.InstanceFilter{States: changing})
	if err != nil {
		return fmt.Errorf("recheck waiting agents: %w", err)
	}
	for _, in := range rows {
		news := in.State == domain.StateReleasing || in.State == domain.StateTerminating || in.RunnerConfig != "" && in.Job != ""
		if waiting[in.CloudID] && news {
			s.waiters.wake(in.CloudID)
		}
	}
	return nil
}
