package app

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/reaper"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

// The configuration in force, not the one a job arrived under, says what
// a launch job is served with and whether a rejected job is served now.
func TestJobsAreRoutedAgainOnTheConfigurationInForce(t *testing.T) {
	const before = "runners:\n  small: {image: ubuntu-24.04, family: [c7a]}\npools:\n  linux:\n    runner: small\n    schedule: [{name: default, hot: 1}]\n"
	const after = "runners:\n  small: {image: ubuntu-24.04, family: [m7a]}\npools:\n  linux:\n    runner: small\n    schedule: [{name: default, hot: 1}]\n" +
		"  gpu:\n    runner: small\n    schedule: [{name: default, hot: 0}]\n"
	a, write := appOnFile(t, before)
	overflow := domain.Job{ID: 1, Labels: []string{"runs-on=1/pool=linux"}, Route: domain.RoutePool, Pool: "linux", Runner: "small"}
	cold := domain.Job{ID: 2, Labels: []string{"runs-on=2/runner=small"}, Route: domain.RouteLaunch, Runner: "small"}
	gpu := []string{"runs-on=3/pool=gpu"}
	if a.takes(gpu) {
		t.Fatal("a job naming a pool not configured is taken")
	}
	write(after)
	if err := a.reloadConfig(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, j := range []domain.Job{overflow, cold} {
		runner, spec, ok := a.respec(j)
		if !ok || runner != "small" || !slices.Equal(spec.Family, []string{"m7a"}) {
			t.Errorf("job %d: respec %q %v %t, want small on m7a as now configured", j.ID, runner, spec.Family, ok)
		}
	}
	if !a.takes(gpu) {
		t.Error("a job naming a pool configured since is not taken")
	}
	elsewhere := overflow
	elsewhere.Pool = "gone"
	if _, _, ok := a.respec(elsewhere); ok {
		t.Error("a job whose labels now route elsewhere is given another runner")
	}
}

// A rejected job's run is cancelled only after two reloads could have
// served it: a longer --reload lengthens the grace.
func TestTheRejectedGraceOutlastsTwoReloads(t *testing.T) {
	for _, tc := range []struct {
		reload, want time.Duration
	}{
		{0, reaper.DefaultRejectedGrace},
		{5 * time.Minute, 10 * time.Minute},
	} {
		cfg, err := config.Parse("runs-on.yml", []byte("runners:\n  small: {image: ubuntu-24.04}\npools: {}\n"))
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(context.Background(), Options{Config: cfg, ConfigInterval: tc.reload, StorePath: sqlitetest.Path(t),
			WebhookSecret: "secret", AdminToken: "token", Clock: clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)),
			Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Reconciler.RejectedGrace; got != tc.want {
			t.Errorf("reloading every %v: grace %v, want %v", tc.reload, got, tc.want)
		}
		a.Close()
	}
}
