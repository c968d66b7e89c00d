package appplatform

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
)

var repoScope = domain.Scope{Owner: "acme", Repo: "app"}

func TestDeadRunnerCleanup(t *testing.T) {
	t.Run("a runner that takes a job before its delete is left alone", func(t *testing.T) {
		r := newRig(t, nil)
		r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: testPrefix + "waking"})
		r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: testPrefix + "dead"})
		// GitHub answers 422 for the first delete: the runner is busy now.
		r.gh.FailNext("DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}", 422, 1)
		rep, err := r.cycle()
		if err != nil {
			t.Fatalf("a busy runner is no error: %v", err)
		}
		if rep.Dead != 2 || len(rep.Busy) != 1 || len(rep.Deleted) != 1 {
			t.Fatalf("dead %d, busy %q, deleted %q", rep.Dead, rep.Busy, rep.Deleted)
		}
		if names := runnerNames(r.gh.Runners()); !slices.Equal(names, rep.Busy) {
			t.Fatalf("runners left %q, want the busy one %q", names, rep.Busy)
		}
	})
	t.Run("without a prefix every offline idle runner goes", func(t *testing.T) {
		r := newRig(t, map[string]string{EnvRunnerNamePrefix: ""})
		r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: "a-dead"})
		r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: "b-dead"})
		r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: "c-offline-busy", Busy: true})
		r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: "d-online", Online: true})
		rep, err := r.cycle()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.Deleted, []string{"a-dead", "b-dead"}) {
			t.Fatalf("deleted %q", rep.Deleted)
		}
		if names := runnerNames(r.gh.Runners()); !slices.Equal(names, []string{"c-offline-busy", "d-online"}) {
			t.Fatalf("left %q", names)
		}
	})
	t.Run("a transient failure stops the cleanup, not the scaling", func(t *testing.T) {
		r := newRig(t, fastEnv)
		r.queue(4)
		r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: testPrefix + "dead"})
		r.gh.FailNext("DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}", 500, 1)
		rep, err := r.cycle()
		if !IsTransient(err) || !rep.Scaled || rep.Skipped != "" || len(r.gh.Runners()) != 1 {
			t.Fatalf("err %v, scaled %v, skipped %q, runners %d", err, rep.Scaled, rep.Skipped, len(r.gh.Runners()))
		}
		if !strings.Contains(r.logs.String(), "dead-runner cleanup") {
			t.Fatalf("the failure was not logged:\n%s", r.logs)
		}
		rep, err = r.advanceCycle(time.Minute)
		if err != nil || len(rep.Deleted) != 1 {
			t.Fatalf("next cycle: deleted %q, err %v", rep.Deleted, err)
		}
	})
}

// TestOrganisationScope counts demand over every repository of the
// organisation (archived ones have no runs) and removes the
// organisation's dead runners.
func TestOrganisationScope(t *testing.T) {
	r := newRig(t, map[string]string{EnvOwner: "", EnvRepo: "", EnvOrg: "acme", EnvRunnerNamePrefix: "", "BREACH_THRESHOLD": "1"})
	r.gh.PageSize(1)
	r.gh.QueueJob("acme/app", []string{"self-hosted"})
	r.gh.QueueJob("acme/lib", []string{"self-hosted", "arm64"})
	r.gh.QueueJob("acme/lib", []string{"macos-latest"})
	running := r.gh.QueueJob("acme/docs", []string{"self-hosted"})
	must(t, r.gh.StartJob(running.ID, "any-name"))
	hosted := r.gh.QueueJob("acme/docs", []string{"ubuntu-latest"})
	must(t, r.gh.StartJob(hosted.ID, "GitHub Actions 12"))
	r.gh.QueueJob("acme/old", []string{"self-hosted"})
	must(t, r.gh.ArchiveRepo("acme/old"))
	r.gh.AddRunner(fakegh.RunnerSpec{Scope: domain.Scope{Owner: "acme"}, Name: "org-dead"})
	r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: "repo-dead"})

	rep, err := r.cycle()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Demand != (Demand{Queued: 2, InProgress: 1}) {
		t.Fatalf("demand %+v, want 2 queued and 1 in progress", rep.Demand)
	}
	if !rep.Scaled || r.count() != 2 {
		t.Fatalf("scaled %v to %d (%s)", rep.Scaled, r.count(), rep.Decision.Reason)
	}
	if !slices.Equal(rep.Deleted, []string{"org-dead"}) {
		t.Fatalf("deleted %q: an organisation's cleanup touches only its own runners", rep.Deleted)
	}
}
