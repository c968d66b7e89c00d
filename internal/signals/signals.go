// Package signals turns what instances report about themselves into state
// changes. The agent API and the simulated cloud's agents both deliver here.
package signals

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Handler applies instance signals to the store.
type Handler struct {
	Store     domain.Store
	Clock     domain.Clock
	Deadlines domain.Deadlines
	// Pool returns a pool's settings (for the hot idle lifetime); it may
	// be nil, or report false for a pool no longer configured.
	Pool func(name string) (domain.Pool, bool)
	Log  *slog.Logger
}

var _ domain.SignalSink = (*Handler)(nil)

// ErrUnknownInstance means no row carries the signal's cloud id yet; the
// sender retries (the row may be a moment away from recording it).
var ErrUnknownInstance = errors.New("no instance with that cloud id")

// Signal applies s. Signals that no longer apply (a warm signal for an
// instance already claimed or terminating) are accepted and ignored.
func (h *Handler) Signal(ctx context.Context, s domain.Signal) error {
	rows, err := h.Store.ListInstances(ctx, domain.InstanceFilter{CloudID: s.CloudID})
	if err != nil {
		return fmt.Errorf("signal %s from %s: %w", s.Kind, s.CloudID, err)
	}
	if len(rows) == 0 {
		return fmt.Errorf("signal %s from %s: %w", s.Kind, s.CloudID, ErrUnknownInstance)
	}
	in := rows[len(rows)-1]
	switch s.Kind {
	case domain.SignalWarm:
		return h.warm(ctx, in)
	}
	return fmt.Errorf("signal %q from %s: not handled", s.Kind, s.CloudID)
}

// warm: boot and warm-up finished; the instance is ready for a job (hot) or
// to be parked (stopped pools).
func (h *Handler) warm(ctx context.Context, in domain.Instance) error {
	if in.State != domain.StateBooting {
		h.Log.Debug("warm signal ignored", "instance", in.ID, "state", in.State)
		return nil
	}
	now := h.Clock.Now()
	deadline := h.Deadlines.Until(domain.StateReady, now)
	if in.Role == domain.RoleHot && h.Pool != nil {
		if p, ok := h.Pool(in.Pool); ok && p.HotIdleLifetime > 0 {
			deadline = now.Add(p.HotIdleLifetime)
		}
	}
	_, err := h.Store.Transition(ctx, in.ID, domain.GuardOf(in), func(i *domain.Instance) {
		i.State, i.Deadline = domain.StateReady, deadline
	})
	if errors.Is(err, domain.ErrConflict) {
		return nil // it moved on (terminated, say); nothing to do
	}
	if err != nil {
		return fmt.Errorf("warm %s: %w", in.ID, err)
	}
	h.Log.Debug("instance warm", "instance", in.ID, "pool", in.Pool, "role", in.Role)
	return nil
}
