package app_test

import (
	"context"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/intake"
)

// The reconciler admits a queued job GitHub sent no webhook for only when
// the intake takes it as this environment's. A job that is ours but names
// a pool this environment lacks is recorded rejected by the intake, so it
// too is admitted once; someone else's never are, however long they stay
// queued.
func TestTheReconcilerAdmitsOnlyTheJobsTheIntakeTakes(t *testing.T) {
	a := newApp(t, app.Options{Environment: "production", Intake: intake.Options{Wait: -1, Linger: -1}})
	ctx := t.Context()
	a.Reconciler.Scopes = func(context.Context) []domain.Scope { return []domain.Scope{{Owner: "acme", Repo: "app"}} }
	gh := a.Sim.GitHub
	gh.DropDeliveries(4)
	for _, labels := range [][]string{
		{"ubuntu-latest"},                     // GitHub-hosted
		{"runs-on/pool=linux/env=staging"},    // another environment's
		{"runs-on/pool=linux/env=production"}, // ours
		{"runs-on/pool=gpu"},                  // ours, rejected: no such pool
	} {
		gh.QueueJob(ghsim.JobSpec{Repo: "acme/app", Labels: labels})
	}
	cycle := func() int {
		t.Helper()
		rep, err := a.Reconciler.Cycle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Recovered
	}
	if n := cycle(); n != 2 {
		t.Fatalf("recovered %d jobs, want ours: the pool job and the rejected one", n)
	}
	for {
		n, err := a.Intake.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	recorded, err := a.Store.ListJobs(ctx, domain.JobFilter{})
	if err != nil || len(recorded) != 2 {
		t.Fatalf("the intake recorded %+v, %v; want our two jobs", recorded, err)
	}
	for range 2 {
		if n := cycle(); n != 0 {
			t.Fatalf("recovered %d jobs again after the intake took ours", n)
		}
	}
}
