package app_test

import (
	"context"
	"fmt"
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

// With organisation runners, the reconciler looks for queued jobs in the
// repositories jobs came from, not across the whole organisation (three
// calls for each of its repositories every cycle), and lists the runners
// once, at the organisation.
func TestOrgRunnersAreReconciledByRepository(t *testing.T) {
	a := newApp(t, app.Options{RunnerScope: "org"})
	ctx := t.Context()
	if _, err := a.Store.CreateJobs(ctx, []domain.Job{
		{ID: 1, Repo: "acme/app", Status: domain.JobCompleted}, {ID: 2, Repo: "acme/web", Status: domain.JobCompleted},
		{ID: 3, Repo: "acme/app", Status: domain.JobCompleted},
	}); err != nil {
		t.Fatal(err)
	}
	got := a.Reconciler.Scopes(ctx)
	want := map[domain.Scope]bool{
		{Owner: "acme", Repo: "app", OrgRunners: true}: true, {Owner: "acme", Repo: "web", OrgRunners: true}: true,
	}
	if len(got) != len(want) {
		t.Fatalf("scopes %v, want the two repositories", got)
	}
	for _, s := range got {
		if !want[s] || s.Runners() != (domain.Scope{Owner: "acme"}) {
			t.Fatalf("scope %+v (runners at %+v), want a repository whose runners are the organisation's", s, s.Runners())
		}
	}
}

// The reaper looks at the repositories of recent jobs a few at a time, in
// turn: every repository looked at every minute cost about four calls
// each, over an installation's hourly budget at a few hundred.
func TestRecentRepositoriesAreReconciledInTurn(t *testing.T) {
	a := newApp(t, app.Options{})
	ctx := t.Context()
	var jobs []domain.Job
	for i := range 25 {
		jobs = append(jobs, domain.Job{ID: int64(i + 1), Repo: fmt.Sprintf("acme/repo-%02d", i), Status: domain.JobCompleted})
	}
	if _, err := a.Store.CreateJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	seen := map[domain.Scope]bool{}
	for range 3 {
		got := a.Reconciler.Scopes(ctx)
		if len(got) != 10 {
			t.Fatalf("%d repositories looked at in a cycle, want 10", len(got))
		}
		for _, s := range got {
			seen[s] = true
		}
	}
	if len(seen) != 25 {
		t.Fatalf("%d of the 25 repositories looked at in three cycles, want every one", len(seen))
	}
}
