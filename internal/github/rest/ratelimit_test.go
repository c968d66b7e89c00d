package rest_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/ratelimit"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// budgeted is a client of srv whose calls go through an account's budget,
// as serve builds them, with srv and the budget on clk. The clock starts
// at the wall clock's second, so that a client holding calls back by the
// wall clock shows.
func budgeted(t *testing.T, srv *fakegh.Server) (*rest.Client, *clock.Virtual) {
	t.Helper()
	clk := clock.NewVirtual(time.Now().Truncate(time.Second))
	srv.SetClock(clk)
	srv.AddOrg("acme")
	budget := ratelimit.NewBudget("acme", clk, nil, slog.New(slog.DiscardHandler))
	return newClientWith(t, srv, rest.Options{Clock: clk, Transport: budget.Transport(http.DefaultTransport)}), clk
}

// listRunners lists acme's runners and wants the outcome: nil for
// success, else an error wrapping want.
func listRunners(t *testing.T, c *rest.Client, want error) error {
	t.Helper()
	_, err := c.ListRunners(t.Context(), org)
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Fatalf("ListRunners: %v, want %v", err, want)
	}
	return err
}

// A secondary limit without retry-after comes with x-ratelimit-reset up
// to an hour away: the account waits a minute, as GitHub asks, and its
// calls go again then.
func TestSecondaryLimitWithoutRetryAfterPausesAMinute(t *testing.T) {
	srv := newServer(t)
	srv.SecondaryRetryAfter(0)
	srv.FailNext("GET /orgs/{org}/actions/runners", 429, 1)
	c, clk := budgeted(t, srv)
	err := listRunners(t, c, domain.ErrRateLimited)
	var limit *rest.RateLimitError
	if !errors.As(err, &limit) || !limit.Reset.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("%v: want a RateLimitError ending in a minute, at %s", err, clk.Now().Add(time.Minute))
	}
	clk.Advance(30 * time.Second)
	listRunners(t, c, domain.ErrRateLimited)
	if n := srv.Count("GET /orgs/{org}/actions/runners"); n != 1 {
		t.Errorf("%d calls within the minute, want only the refused one", n)
	}
	clk.Advance(30 * time.Second)
	listRunners(t, c, nil)
}

// A spent primary budget holds the account's calls back until its reset
// on bullpen's clock, through the budget alone: the client sends what it
// is asked to.
func TestPrimaryLimitPausesUntilItsReset(t *testing.T) {
	srv := newServer(t)
	c, clk := budgeted(t, srv)
	reset := clk.Now().Add(10 * time.Minute)
	srv.RateLimit(reset)
	err := listRunners(t, c, domain.ErrRateLimited)
	var limit *rest.RateLimitError
	if !errors.As(err, &limit) || !limit.Reset.Equal(reset) {
		t.Fatalf("%v: want a RateLimitError ending at %s", err, reset)
	}
	for range 2 {
		listRunners(t, c, domain.ErrRateLimited)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests under the limit, want 1", n)
	}
	clk.Advance(10 * time.Minute)
	listRunners(t, c, nil)

	srv.RateLimit(clk.Now().Add(time.Hour))
	bare := newClientWith(t, srv, rest.Options{Clock: clk})
	for range 2 {
		listRunners(t, bare, domain.ErrRateLimited)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Errorf("a client without a budget sent %d of its 2 calls under the limit", n-2)
	}
}

// GitHub's secondary limit can come as a 403 with its message alone; a
// 403 without it is a refusal for want of permission.
func TestSecondaryLimitByMessage(t *testing.T) {
	tests := []struct {
		message string
		limited bool
	}{
		{"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.", true},
		{"Resource not accessible by integration", false},
	}
	for _, tc := range tests {
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("x-ratelimit-remaining", "4000")
			w.Header().Set("x-ratelimit-reset", fmt.Sprint(epoch.Add(time.Hour).Unix()))
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, `{"message":%q,"documentation_url":"https://docs.github.com/rest"}`, tc.message)
		}))
		c, err := rest.New(rest.Options{BaseURL: api.URL, Token: testToken, Clock: clock.NewVirtual(epoch)})
		if err != nil {
			t.Fatal(err)
		}
		err = c.DeleteRunner(t.Context(), org, 1)
		api.Close()
		var limit *rest.RateLimitError
		if got := errors.As(err, &limit); got != tc.limited || got && !limit.Reset.Equal(epoch.Add(time.Minute)) {
			t.Errorf("403 %q: %v; want rate limited for a minute: %t", tc.message, err, tc.limited)
		}
	}
}

// An installation token refused for a rate limit is not a wrong key.
func TestInstallationTokenRateLimited(t *testing.T) {
	key, keyPEM := newAppKey(t)
	srv := newAppServer(t, key)
	srv.SecondaryRetryAfter(0)
	srv.FailNext("POST /app/installations/{installation_id}/access_tokens", 429, 1)
	clk := clock.NewVirtual(epoch)
	c, err := rest.New(rest.Options{BaseURL: srv.URL(), AppID: appID, InstallationID: installationID, PrivateKey: keyPEM, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListRunners(t.Context(), org)
	var limit *rest.RateLimitError
	if !errors.As(err, &limit) || errors.Is(err, rest.ErrUnauthorized) || !limit.Reset.Equal(epoch.Add(time.Minute)) {
		t.Errorf("ListRunners with the token refused for a rate limit: %v, want a RateLimitError ending in a minute", err)
	}
}
