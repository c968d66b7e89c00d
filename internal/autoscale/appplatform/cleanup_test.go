package appplatform

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

var repoScope = domain.Scope{Owner: "acme", Repo: "app"}

func TestDeadRunnerCleanup(t *testing.T) {
	t.Run("a runner that takes a job before its delete is left alone", func(t *testing.T) {
		r := newRig(t, nil)
		r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: testPrefix + "waking"})
		r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: testPrefix + "dead"})
		firstSighting(t, r, 2)
		// GitHub answers 422 for the first delete: the runner is busy now.
		r.gh.FailNext("DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}", 422, 1)
		rep, err := r.advanceCycle(DeadRunnerAge)
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
		firstSighting(t, r, 2)
		rep, err := r.advanceCycle(DeadRunnerAge)
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
		r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: testPrefix + "dead"})
		firstSighting(t, r, 1)
		r.queue(4)
		r.gh.FailNext("DELETE /repos/{owner}/{repo}/actions/runners/{runner_id}", 500, 1)
		rep, err := r.advanceCycle(DeadRunnerAge)
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
	r := newRig(t, map[string]string{EnvOwner: "", EnvRepo: "", EnvOrg: "acme", EnvRunnerNamePrefix: "org-", "BREACH_THRESHOLD": "1"})
	r.gh.PageSize(1)
	r.gh.QueueJob("acme/app", []string{"self-hosted"})
	r.gh.QueueJob("acme/lib", []string{"self-hosted", "arm64"})
	r.gh.QueueJob("acme/lib", []string{"macos-latest"})
	running := r.gh.QueueJob("acme/docs", []string{"self-hosted"})
	must(t, r.gh.StartJob(running.ID, "org-7"))
	hosted := r.gh.QueueJob("acme/docs", []string{"ubuntu-latest"})
	must(t, r.gh.StartJob(hosted.ID, "GitHub Actions 12"))
	r.gh.QueueJob("acme/old", []string{"self-hosted"})
	must(t, r.gh.ArchiveRepo("acme/old"))
	r.gh.AddRunner(fakegh.RunnerSpec{Scope: domain.Scope{Owner: "acme"}, Name: "org-dead"})
	r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: "org-repo-dead"})

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
	if rep.Offline != 1 || len(rep.Deleted) != 0 {
		t.Fatalf("first poll: %d runners seen offline, deleted %q; want one seen and none deleted", rep.Offline, rep.Deleted)
	}
	if rep, err = r.advanceCycle(DeadRunnerAge); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Deleted, []string{"org-dead"}) {
		t.Fatalf("deleted %q: an organisation's cleanup touches only its own runners", rep.Deleted)
	}
}

// firstSighting runs a cycle that sees want runners offline and idle for
// the first time, and deletes none of them.
func firstSighting(t *testing.T, r *rig, want int) {
	t.Helper()
	before := runnerNames(r.gh.Runners())
	rep, err := r.cycle()
	if err != nil {
		t.Fatalf("first sighting: %v", err)
	}
	if rep.Offline != want || rep.Dead != 0 || len(rep.Deleted) != 0 {
		t.Fatalf("first sighting: offline %d, dead %d, deleted %q; want %d seen and none deleted", rep.Offline, rep.Dead, rep.Deleted, want)
	}
	if after := runnerNames(r.gh.Runners()); !slices.Equal(after, before) {
		t.Fatalf("first sighting: runners %q became %q", before, after)
	}
}

// seenOnline is GitHub as the scaler sees it, with some runners' online
// status set by the test (the fake keeps a runner's status as added).
type seenOnline struct {
	GitHub
	online map[string]bool
}

func (g *seenOnline) ListRunners(ctx context.Context, s domain.Scope) ([]domain.GitHubRunner, error) {
	runners, err := g.GitHub.ListRunners(ctx, s)
	for i, r := range runners {
		if on, ok := g.online[r.Name]; ok {
			runners[i].Online = on
		}
	}
	return runners, err
}

// seenOnlineFor makes r's scaler see GitHub through a seenOnline and adds
// the runners named, offline until the test sets them online.
func seenOnlineFor(t *testing.T, r *rig, runners ...string) *seenOnline {
	t.Helper()
	rc, err := rest.New(rest.Options{Token: testGitHubToken, BaseURL: r.gh.URL(), Clock: r.clk})
	must(t, err)
	gh := &seenOnline{GitHub: rc, online: map[string]bool{}}
	r.scaler, err = New(r.cfg, Deps{GitHub: gh, Clock: r.clk})
	must(t, err)
	for _, name := range runners {
		r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: name})
	}
	return gh
}

// A runner offline at one poll may be registering or restarting: it is
// deleted only when it is still offline and idle at the next poll, and a
// poll that could not list the runners breaks the run. The polls here are
// DeadRunnerAge apart, so that only the sightings decide.
func TestDeadRunnersNeedTwoSightingsInARow(t *testing.T) {
	r := newRig(t, nil)
	booting, crashed := testPrefix+"booting", testPrefix+"crashed"
	gh := seenOnlineFor(t, r, booting, crashed)
	firstSighting(t, r, 2)

	// The booting runner comes online; the crashed one stays offline.
	gh.online[booting] = true
	rep, err := r.advanceCycle(DeadRunnerAge)
	if err != nil || !slices.Equal(rep.Deleted, []string{crashed}) || rep.Offline != 0 {
		t.Fatalf("second poll: deleted %q, offline %d, err %v; want the crashed runner alone", rep.Deleted, rep.Offline, err)
	}

	// It goes offline (restarting): seen once, kept.
	gh.online[booting] = false
	if rep, err = r.advanceCycle(DeadRunnerAge); err != nil || rep.Offline != 1 || len(rep.Deleted) != 0 {
		t.Fatalf("restarting: offline %d, deleted %q, err %v", rep.Offline, rep.Deleted, err)
	}
	// The listing fails: the next sighting is a first one again.
	r.gh.FailNext("GET /repos/{owner}/{repo}/actions/runners", 500, 1)
	if _, err = r.advanceCycle(DeadRunnerAge); !IsTransient(err) {
		t.Fatalf("failed listing: %v", err)
	}
	if rep, err = r.advanceCycle(DeadRunnerAge); err != nil || rep.Offline != 1 || len(rep.Deleted) != 0 {
		t.Fatalf("after a failed listing: offline %d, deleted %q, err %v", rep.Offline, rep.Deleted, err)
	}
	if rep, err = r.advanceCycle(DeadRunnerAge); err != nil || !slices.Equal(rep.Deleted, []string{booting}) {
		t.Fatalf("still offline a poll later: deleted %q, err %v", rep.Deleted, err)
	}
	if names := runnerNames(r.gh.Runners()); len(names) != 0 {
		t.Fatalf("runners left %q", names)
	}
}

// Short polls do not make a runner dead sooner: one offline for a poll or
// two while it restarts to update itself is kept, and one that stays
// offline goes at the first poll DeadRunnerAge after it was first seen so.
func TestDeadRunnersNeedTime(t *testing.T) {
	const poll = 10 * time.Second
	r := newRig(t, map[string]string{"POLL_INTERVAL": "10"})
	updating, crashed := testPrefix+"updating", testPrefix+"crashed"
	gh := seenOnlineFor(t, r, updating, crashed)
	firstSighting(t, r, 2)

	// The updating runner is still offline at the next poll, 10 s on.
	rep, err := r.advanceCycle(poll)
	if err != nil || rep.Offline != 2 || rep.Dead != 0 || len(rep.Deleted) != 0 {
		t.Fatalf("t=10s: offline %d, dead %d, deleted %q, err %v; want both kept", rep.Offline, rep.Dead, rep.Deleted, err)
	}
	gh.online[updating] = true
	for at := 2 * poll; at < DeadRunnerAge; at += poll {
		if rep, err = r.advanceCycle(poll); err != nil || rep.Offline != 1 || len(rep.Deleted) != 0 {
			t.Fatalf("t=%v: offline %d, deleted %q, err %v; want the crashed runner kept until %v", at, rep.Offline, rep.Deleted, err, DeadRunnerAge)
		}
	}
	if rep, err = r.advanceCycle(poll); err != nil || !slices.Equal(rep.Deleted, []string{crashed}) || rep.Offline != 0 {
		t.Fatalf("t=%v: deleted %q, offline %d, err %v; want the crashed runner alone", DeadRunnerAge, rep.Deleted, rep.Offline, err)
	}
	if names := runnerNames(r.gh.Runners()); !slices.Equal(names, []string{updating}) {
		t.Fatalf("runners left %q, want the updated one", names)
	}
}

// With cleanup off, nothing is ever deleted.
func TestDeadRunnerCleanupOff(t *testing.T) {
	r := newRig(t, map[string]string{EnvDeadRunnerCleanup: "false"})
	r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: testPrefix + "crashed"})
	for range 3 {
		if rep, err := r.advanceCycle(time.Minute); err != nil || rep.Offline != 0 || len(rep.Deleted) != 0 {
			t.Fatalf("offline %d, deleted %q, err %v", rep.Offline, rep.Deleted, err)
		}
	}
	if len(r.gh.Runners()) != 1 {
		t.Fatal("a runner was deleted with cleanup off")
	}
}
