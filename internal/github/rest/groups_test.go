package rest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// Organisation runners join the runner group named in the options, looked
// up once per organisation; a name no group has is an error listing the
// groups there are, and a runner whose group id is unknown is refused.
func TestRunnerGroupByName(t *testing.T) {
	srv := newServer(t)
	srv.AddOrg("acme")
	srv.AddRunnerGroup("acme", "ci-large")
	ctx := context.Background()
	c := newClientWith(t, srv, rest.Options{RunnerGroup: "CI-Large"})
	for _, name := range []string{"r1", "r2"} {
		if _, err := c.RegisterRunner(ctx, domain.Scope{Owner: "acme"}, name, []string{"linux"}); err != nil {
			t.Fatalf("register %s in the named group: %v", name, err)
		}
	}
	if n := srv.Count("GET /orgs/{org}/actions/runner-groups"); n != 1 {
		t.Fatalf("the group was looked up %d times, want once", n)
	}
	missing := newClientWith(t, srv, rest.Options{RunnerGroup: "gpu"})
	_, err := missing.RegisterRunner(ctx, domain.Scope{Owner: "acme"}, "r3", []string{"linux"})
	if !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), `runner group "gpu" does not exist in acme (its groups: Default, ci-large)`) {
		t.Fatalf("a group that does not exist: %v", err)
	}
	byID := newClientWith(t, srv, rest.Options{RunnerGroupID: 999})
	if _, err := byID.RegisterRunner(ctx, domain.Scope{Owner: "acme"}, "r4", []string{"linux"}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("an unknown group id: %v", err)
	}
}

// Enterprise runners join the enterprise's runner group of that name, not
// an organisation's.
func TestEnterpriseRunnerGroupByName(t *testing.T) {
	srv := newServer(t)
	srv.AddOrg("acme")
	srv.AddRunnerGroup("acme", "org-only")
	srv.AddEnterprise("megacorp", "acme")
	gpu := srv.AddEnterpriseRunnerGroup("megacorp", "GPU")
	ctx := context.Background()
	c := newClientWith(t, srv, rest.Options{RunnerGroup: "gpu"})
	ent := domain.Scope{Enterprise: "megacorp", Owner: "acme", Repo: "app"}
	reg, err := c.RegisterRunner(ctx, ent, "r1", []string{"linux"})
	if err != nil {
		t.Fatalf("register in the enterprise's group: %v", err)
	}
	if n := srv.Count("GET /enterprises/{enterprise}/actions/runner-groups"); n != 1 {
		t.Fatalf("the enterprise's groups were looked up %d times, want once", n)
	}
	if got := srv.RunnerGroupOf(reg.Name); got != gpu {
		t.Errorf("the runner joined group %d, want the enterprise's GPU group %d", got, gpu)
	}
	orgOnly := newClientWith(t, srv, rest.Options{RunnerGroup: "org-only"})
	_, err = orgOnly.RegisterRunner(ctx, ent, "r2", []string{"linux"})
	if !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), `runner group "org-only" does not exist in enterprise megacorp (its groups: Default, GPU)`) {
		t.Fatalf("an organisation's group named for enterprise runners: %v", err)
	}
}

func TestRunnerWorkFolder(t *testing.T) {
	srv := newServer(t)
	srv.AddRepo("acme/app")
	c := newClientWith(t, srv, rest.Options{WorkFolder: "jobs"})
	if _, err := c.RegisterRunner(context.Background(), domain.Scope{Owner: "acme", Repo: "app"}, "r1", []string{"linux"}); err != nil {
		t.Fatal(err)
	}
	if got := srv.RunnerWorkFolder("r1"); got != "jobs" {
		t.Fatalf("work folder %q, want jobs", got)
	}
}

// Queued jobs are the queued ones of each run's latest attempt: not jobs
// held waiting for an approval or pending, until GitHub queues them, and a
// re-run's new attempt rather than the old.
func TestQueuedJobsSkipHeldJobsAndOldAttempts(t *testing.T) {
	srv := newServer(t)
	ctx := context.Background()
	c := newClient(t, srv)
	queued := srv.QueueJob("acme/app", []string{"linux"}, fakegh.Named("build"))
	waiting := srv.QueueJob("acme/app", []string{"linux"}, fakegh.Named("deploy"), fakegh.InRun(queued.RunID), fakegh.Held("waiting"))
	pending := srv.QueueJob("acme/app", []string{"linux"}, fakegh.Held("pending"))
	ids := func() []int64 {
		t.Helper()
		jobs, err := c.QueuedJobs(ctx, domain.Scope{Owner: "acme", Repo: "app"})
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		slices.Sort(out)
		return out
	}
	if got := ids(); !slices.Equal(got, []int64{queued.ID}) {
		t.Fatalf("queued %v, want only %d (not the held %d, %d)", got, queued.ID, waiting.ID, pending.ID)
	}
	if err := srv.Release(waiting.ID); err != nil {
		t.Fatal(err)
	}
	if got := ids(); !slices.Equal(got, []int64{queued.ID, waiting.ID}) {
		t.Fatalf("after the approval, queued %v", got)
	}
	other := srv.QueueJob("acme/app", []string{"linux"})
	if err := srv.CompleteJob(other.ID, "failure"); err != nil {
		t.Fatal(err)
	}
	if err := c.RerunJob(ctx, "acme/app", other.ID); err != nil {
		t.Fatal(err)
	}
	jobs, err := c.QueuedJobs(ctx, domain.Scope{Owner: "acme", Repo: "app"})
	if err != nil {
		t.Fatal(err)
	}
	var rerun []domain.GitHubJob
	for _, j := range jobs {
		if j.RunID == other.RunID {
			rerun = append(rerun, j)
		}
	}
	if len(rerun) != 1 || rerun[0].ID == other.ID || rerun[0].RunAttempt != 2 {
		t.Fatalf("the re-run run's queued jobs %+v, want its second attempt alone", rerun)
	}
}
