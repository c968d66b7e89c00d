// Package looptest runs loops in tests the way the control plane runs them.
package looptest

import (
	"context"
	"log/slog"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/loop"
)

// Run runs loops with a runner of its own that registers no metrics and
// logs nothing, until ctx ends.
func Run(ctx context.Context, clk domain.Clock, loops ...loop.Loop) error {
	r, err := loop.NewRunner(clk, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return err
	}
	return r.Run(ctx, loops...)
}
