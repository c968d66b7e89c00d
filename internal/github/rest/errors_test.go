package rest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

var epoch = time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)

var (
	org  = domain.Scope{Owner: "acme"}
	repo = "acme/app"
)

// errorCase is one way a call fails and what the caller must see.
type errorCase struct {
	name      string
	setup     func(t *testing.T, srv *fakegh.Server) // seeds state and faults
	call      func(t *testing.T, c *rest.Client, srv *fakegh.Server) error
	want      error     // errors.Is target; nil with no other expectation means success
	status    int       // the *rest.APIError status, if one is expected
	transient bool      // IsTransient
	reset     time.Time // the *rest.RateLimitError reset, if one is expected
}

func TestErrorMapping(t *testing.T) {
	hourAhead := time.Now().Add(time.Hour).Truncate(time.Second)
	listRuns := func(_ *testing.T, c *rest.Client, _ *fakegh.Server) error {
		_, err := c.ListJobs(context.Background(), domain.Scope{Owner: "acme", Repo: "app"}, rest.StatusQueued)
		return err
	}
	fail := func(pattern string, status int) func(*testing.T, *fakegh.Server) {
		return func(_ *testing.T, srv *fakegh.Server) { srv.FailNext(pattern, status, 1) }
	}
	tests := []errorCase{
		{name: "delete busy runner is ErrRunnerBusy", setup: func(t *testing.T, srv *fakegh.Server) {
			srv.AddRunner(fakegh.RunnerSpec{Scope: org, Name: "busy", Labels: []string{"x"}, Online: true, Busy: true})
		}, call: func(t *testing.T, c *rest.Client, srv *fakegh.Server) error {
			return c.DeleteRunner(t.Context(), org, srv.Runners()[0].ID)
		}, want: domain.ErrRunnerBusy, status: 422},
		{name: "delete unknown runner is ErrNotFound", call: func(t *testing.T, c *rest.Client, _ *fakegh.Server) error {
			return c.DeleteRunner(t.Context(), domain.Scope{Owner: "acme", Repo: "app"}, 99)
		}, want: domain.ErrNotFound, status: 404},
		{name: "register a taken name is ErrExists", call: func(t *testing.T, c *rest.Client, _ *fakegh.Server) error {
			if _, err := c.RegisterRunner(t.Context(), org, "twin", []string{"x"}); err != nil {
				t.Fatal(err)
			}
			_, err := c.RegisterRunner(t.Context(), org, "twin", []string{"x"})
			return err
		}, want: domain.ErrExists, status: 409},
		{name: "register refused by validation is ErrInvalidRequest", setup: fail("POST /orgs/{org}/actions/runners/generate-jitconfig", 422),
			call: func(t *testing.T, c *rest.Client, _ *fakegh.Server) error {
				_, err := c.RegisterRunner(t.Context(), org, "r", []string{"x"})
				return err
			}, want: domain.ErrInvalidRequest, status: 422},
		{name: "unknown job is ErrNotFound", call: func(t *testing.T, c *rest.Client, _ *fakegh.Server) error {
			_, err := c.GetJob(t.Context(), repo, 42)
			return err
		}, want: domain.ErrNotFound, status: 404},
		{name: "unknown run is ErrNotFound", call: func(t *testing.T, c *rest.Client, _ *fakegh.Server) error {
			return c.CancelRun(t.Context(), repo, 42)
		}, want: domain.ErrNotFound, status: 404},
		{name: "cancelling a completed run succeeds", call: func(t *testing.T, c *rest.Client, srv *fakegh.Server) error {
			j := srv.QueueJob(repo, []string{"x"})
			if err := srv.CompleteJob(j.ID, "success"); err != nil {
				t.Fatal(err)
			}
			return c.CancelRun(t.Context(), repo, j.RunID)
		}},
		{name: "re-running a job of a run in progress is ErrRunInProgress", call: func(t *testing.T, c *rest.Client, srv *fakegh.Server) error {
			return c.RerunJob(t.Context(), repo, srv.QueueJob(repo, []string{"x"}).ID)
		}, want: domain.ErrRunInProgress, status: 403},
		{name: "a re-run refused for want of permission is not a run in progress",
			setup: fail("POST /repos/{owner}/{repo}/actions/jobs/{job_id}/rerun", 403),
			call: func(t *testing.T, c *rest.Client, srv *fakegh.Server) error {
				err := c.RerunJob(t.Context(), repo, srv.QueueJob(repo, []string{"x"}).ID)
				if errors.Is(err, domain.ErrRunInProgress) {
					t.Errorf("%v is taken for a run in progress", err)
				}
				return err
			}, status: 403},
		{name: "re-running an unknown job is ErrNotFound", call: func(t *testing.T, c *rest.Client, _ *fakegh.Server) error {
			return c.RerunJob(t.Context(), repo, 42)
		}, want: domain.ErrNotFound, status: 404},
		{name: "410 (a repository or resource gone) is ErrNotFound", setup: fail("GET /repos/{owner}/{repo}/actions/runs", 410), call: listRuns,
			want: domain.ErrNotFound, status: 410},
		{name: "500 is transient", setup: fail("GET /repos/{owner}/{repo}/actions/runs", 500), call: listRuns, status: 500, transient: true},
		{name: "502 is transient", setup: fail("GET /repos/{owner}/{repo}/actions/runs", 502), call: listRuns, status: 502, transient: true},
		{name: "503 on a page of jobs fails the whole listing", setup: func(t *testing.T, srv *fakegh.Server) {
			srv.QueueJob(repo, []string{"x"})
			srv.FailNext("GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs", 503, 1)
		}, call: listRuns, status: 503, transient: true},
		{name: "401 is ErrUnauthorized", setup: fail("GET /repos/{owner}/{repo}/actions/runs", 401), call: listRuns, want: rest.ErrUnauthorized, status: 401},
		{name: "a wrong token is ErrUnauthorized", setup: func(t *testing.T, srv *fakegh.Server) { srv.RequireToken("ghp_other") },
			call: listRuns, want: rest.ErrUnauthorized, status: 401},
		{name: "403 without rate-limit headers is a refusal", setup: fail("GET /repos/{owner}/{repo}/actions/runs", 403), call: listRuns, status: 403},
		{name: "429 with retry-after is rate limited", setup: fail("GET /repos/{owner}/{repo}/actions/runs", 429), call: listRuns,
			want: domain.ErrRateLimited, transient: true, reset: epoch.Add(time.Minute)},
		{name: "429 without retry-after waits a minute, not for the primary limit's reset", setup: func(t *testing.T, srv *fakegh.Server) {
			srv.SecondaryRetryAfter(0)
			srv.FailNext("GET /repos/{owner}/{repo}/actions/runs", 429, 1)
		}, call: listRuns, want: domain.ErrRateLimited, transient: true, reset: epoch.Add(time.Minute)},
		{name: "403 with x-ratelimit-remaining 0 is rate limited", setup: func(t *testing.T, srv *fakegh.Server) { srv.RateLimit(hourAhead) },
			call: listRuns, want: domain.ErrRateLimited, transient: true, reset: hourAhead},
		{name: "an unreachable server is transient", call: func(t *testing.T, c *rest.Client, srv *fakegh.Server) error {
			srv.Close()
			return listRuns(t, c, srv)
		}, transient: true},
		{name: "a status other than queued or in_progress is ErrInvalidRequest", call: func(t *testing.T, c *rest.Client, _ *fakegh.Server) error {
			_, err := c.ListJobs(t.Context(), org, "completed")
			return err
		}, want: domain.ErrInvalidRequest},
		{name: "a repository not owner/name is ErrInvalidRequest", call: func(t *testing.T, c *rest.Client, _ *fakegh.Server) error {
			_, err := c.GetJob(t.Context(), "app", 1)
			return err
		}, want: domain.ErrInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runErrorCase(t, tc) })
	}
}

func runErrorCase(t *testing.T, tc errorCase) {
	srv := newServer(t)
	srv.AddRepo(repo)
	if tc.setup != nil {
		tc.setup(t, srv)
	}
	c := newClientWith(t, srv, rest.Options{Clock: clock.NewVirtual(epoch)})
	err := tc.call(t, c, srv)
	succeeds := tc.want == nil && tc.status == 0 && !tc.transient && tc.reset.IsZero()
	if succeeds {
		if err != nil {
			t.Fatalf("error %v, want none", err)
		}
		return
	}
	if err == nil {
		t.Fatal("no error")
	}
	if tc.want != nil && !errors.Is(err, tc.want) {
		t.Errorf("error %v does not wrap %v", err, tc.want)
	}
	if got := rest.IsTransient(err); got != tc.transient {
		t.Errorf("IsTransient(%v) = %t, want %t", err, got, tc.transient)
	}
	var apiErr *rest.APIError
	if errors.As(err, &apiErr) != (tc.status != 0) || tc.status != 0 && apiErr.Status != tc.status {
		t.Errorf("error %v: want an APIError with status %d", err, tc.status)
	}
	var limit *rest.RateLimitError
	if errors.As(err, &limit) != !tc.reset.IsZero() || !tc.reset.IsZero() && !limit.Reset.Equal(tc.reset) {
		t.Errorf("error %v: want a RateLimitError resetting at %v", err, tc.reset)
	}
	if errors.Is(err, rest.ErrUnauthorized) && !strings.Contains(err.Error(), "GitHub rejected the credentials") {
		t.Errorf("401 error %q does not say the credentials were rejected", err)
	}
}

func TestEndedContextIsNotTransient(t *testing.T) {
	srv := newServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := newClient(t, srv).ListJobs(ctx, org, rest.StatusQueued)
	if !errors.Is(err, context.Canceled) || rest.IsTransient(err) {
		t.Errorf("ListJobs with an ended context: %v (transient %t)", err, rest.IsTransient(err))
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests with an ended context", n)
	}
}

// TestTimeoutIsTransient: a server that never answers costs the client
// its Options.Timeout, then a transient error.
func TestTimeoutIsTransient(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(api.Close)
	c, err := rest.New(rest.Options{BaseURL: api.URL, Token: testToken, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = c.DeleteRunner(t.Context(), org, 1)
	if err == nil || !rest.IsTransient(err) || errors.Is(err, context.Canceled) {
		t.Errorf("DeleteRunner against a silent server: %v, want a transient error", err)
	}
	if !strings.Contains(fmt.Sprint(err), "delete runner 1 in acme") {
		t.Errorf("error %q does not say what was being done", err)
	}
}
