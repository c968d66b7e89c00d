package app_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// The simulated agents' jobs go on finishing while the app closes: their
// deliveries are dropped quietly, not refused with a warning each.
func TestSimulatedDeliveriesAfterCloseAreDroppedQuietly(t *testing.T) {
	cfg, err := config.Parse("runs-on.yml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	o := app.Options{Config: cfg, StorePath: sqlitetest.Path(t), WebhookSecret: "secret", AdminToken: "token",
		Clock: clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)), Log: slog.New(slog.NewTextHandler(logs, nil))}
	a, err := app.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	job := ghsim.JobSpec{Repo: "acme/app", Name: "build", Labels: []string{"runs-on=7/runner=small"}}
	a.Sim.GitHub.QueueJob(job)
	st, err := a.Queue.Stats(context.Background(), domain.QueueInbox)
	if err != nil || st.Visible != 1 {
		t.Fatalf("inbox %+v, %v: a delivery before the close must be queued", st, err)
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a.Sim.GitHub.QueueJob(job)
	if got := logs.Lines("simulated delivery"); len(got) != 0 {
		t.Fatalf("a delivery after the close was logged at INFO or above: %q", got)
	}
}
