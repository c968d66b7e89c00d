package rest_test

import (
	"context"
	"errors"
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
	srv := fakegh.New()
	t.Cleanup(srv.Close)
	srv.RequireToken(testToken)
	srv.AddOrg("acme")
	srv.AddRunnerGroup("acme", "ci-large")
	ctx := context.Background()
	c, err := rest.New(rest.Options{BaseURL: srv.URL(), Token: testToken, RunnerGroup: "CI-Large"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"r1", "r2"} {
		if _, err := c.RegisterRunner(ctx, domain.Scope{Owner: "acme"}, name, []string{"linux"}); err != nil {
			t.Fatalf("register %s in the named group: %v", name, err)
		}
	}
	if n := srv.Count("GET /orgs/{org}/actions/runner-groups"); n != 1 {
		t.Fatalf("the group was looked up %d times, want once", n)
	}
	missing, err := rest.New(rest.Options{BaseURL: srv.URL(), Token: testToken, RunnerGroup: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = missing.RegisterRunner(ctx, domain.Scope{Owner: "acme"}, "r3", []string{"linux"})
	if !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), `runner group "gpu" does not exist in acme (its groups: Default, ci-large)`) {
		t.Fatalf("a group that does not exist: %v", err)
	}
	byID, err := rest.New(rest.Options{BaseURL: srv.URL(), Token: testToken, RunnerGroupID: 999})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := byID.RegisterRunner(ctx, domain.Scope{Owner: "acme"}, "r4", []string{"linux"}); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("an unknown group id: %v", err)
	}
}

func TestRunnerWorkFolder(t *testing.T) {
	srv := fakegh.New()
	t.Cleanup(srv.Close)
	srv.RequireToken(testToken)
	srv.AddRepo("acme/app")
	c, err := rest.New(rest.Options{BaseURL: srv.URL(), Token: testToken, WorkFolder: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RegisterRunner(context.Background(), domain.Scope{Owner: "acme", Repo: "app"}, "r1", []string{"linux"}); err != nil {
		t.Fatal(err)
	}
	if got := srv.RunnerWorkFolder("r1"); got != "jobs" {
		t.Fatalf("work folder %q, want jobs", got)
	}
}
