package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// A failed step of the job path is logged, where it went unsaid; the end
// of the run (a cancelled context) is not a failure.
func TestAFailedStepIsLogged(t *testing.T) {
	var logs testlog.Buffer
	w := &world{log: slog.New(slog.NewTextHandler(&logs, nil))}
	w.stepFailed("provision", errors.New("store down"))
	w.stepFailed("intake", fmt.Errorf("step: %w", context.Canceled))
	w.stepFailed("dispatch", nil)
	if got := logs.Lines("level=WARN"); len(got) != 1 || len(logs.Lines("step=provision", "store down")) != 1 {
		t.Fatalf("logged %q", got)
	}
}
