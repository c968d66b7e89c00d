package ratelimit_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/ratelimit"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

var t0 = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

// github answers every call with the budget in *remaining, or with the
// answer next holds once.
type github struct {
	logs      testlog.Buffer // the budget's log
	srv       *httptest.Server
	calls     atomic.Int32
	remaining atomic.Int32
	next      atomic.Value // func(http.ResponseWriter) or nil
}

func newGitHub(t *testing.T) *github {
	g := &github{}
	g.remaining.Store(4000)
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.calls.Add(1)
		w.Header().Set("x-ratelimit-limit", "5000")
		w.Header().Set("x-ratelimit-remaining", fmt.Sprint(g.remaining.Load()))
		w.Header().Set("x-ratelimit-reset", fmt.Sprint(t0.Add(time.Hour).Unix()))
		if f, _ := g.next.Swap(func(http.ResponseWriter) {}).(func(http.ResponseWriter)); f != nil {
			f(w)
			return
		}
		fmt.Fprint(w, `{}`)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *github) call(t *testing.T, c *http.Client, method, path string) error {
	t.Helper()
	req, _ := http.NewRequest(method, g.srv.URL+path, nil)
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func setup(t *testing.T) (*github, *http.Client, *clock.Virtual) {
	g := newGitHub(t)
	clk := clock.NewVirtual(t0)
	m, err := ratelimit.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := ratelimit.NewBudget("acme", clk, m, slog.New(slog.NewTextHandler(&g.logs, nil)))
	return g, &http.Client{Transport: b.Transport(http.DefaultTransport)}, clk
}

func wantPaused(t *testing.T, err error) {
	t.Helper()
	var p *ratelimit.PausedError
	if !errors.As(err, &p) || !errors.Is(err, domain.ErrRateLimited) {
		t.Fatalf("error %v, want a pause", err)
	}
}

// A secondary limit pauses the account's calls for the time GitHub asks;
// none is sent meanwhile.
func TestASecondaryLimitPausesTheAccount(t *testing.T) {
	g, c, clk := setup(t)
	g.next.Store(func(w http.ResponseWriter) {
		w.Header().Set("retry-after", "30")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"message":"You have exceeded a secondary rate limit."}`)
	})
	_ = g.call(t, c, http.MethodPost, "/repos/acme/app/actions/runners/generate-jitconfig")
	wantPaused(t, g.call(t, c, http.MethodPost, "/repos/acme/app/actions/runners/generate-jitconfig"))
	if n := g.calls.Load(); n != 1 {
		t.Fatalf("%d calls reached GitHub during the pause", n)
	}
	if warned := g.logs.Lines("level=WARN", "account=acme", "until=2026-11-24T09:00:30Z", "retry-after"); len(warned) != 1 {
		t.Fatalf("the pause was logged %d times, want once when it starts:\n%s", len(warned), g.logs.String())
	}
	clk.Advance(30 * time.Second)
	if err := g.call(t, c, http.MethodGet, "/repos/acme/app/actions/runners"); err != nil {
		t.Fatalf("after the pause: %v", err)
	}
}

// A 403 that names the secondary limit without headers pauses a minute;
// another 403 pauses nothing.
func TestASecondaryLimitWithoutHeadersPausesAMinute(t *testing.T) {
	g, c, clk := setup(t)
	g.next.Store(func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`)
	})
	_ = g.call(t, c, http.MethodGet, "/repos/acme/app/actions/runners")
	clk.Advance(59 * time.Second)
	wantPaused(t, g.call(t, c, http.MethodGet, "/repos/acme/app/actions/runners"))
	clk.Advance(time.Second)
	g.next.Store(func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"message":"Resource not accessible by integration"}`)
	})
	_ = g.call(t, c, http.MethodGet, "/repos/acme/app/actions/runners")
	if err := g.call(t, c, http.MethodGet, "/repos/acme/app/actions/runners"); err != nil {
		t.Fatalf("a permission 403 paused the account: %v", err)
	}
}

// With the budget at its reserve, housekeeping waits and registrations go.
func TestALowBudgetIsKeptForRegistrations(t *testing.T) {
	g, c, _ := setup(t)
	g.remaining.Store(400)
	_ = g.call(t, c, http.MethodGet, "/repos/acme/app/actions/runs")
	err := g.call(t, c, http.MethodGet, "/repos/acme/app/actions/runners")
	wantPaused(t, err)
	if !strings.Contains(err.Error(), "kept for runner registrations") {
		t.Fatalf("error %v", err)
	}
	if err := g.call(t, c, http.MethodPost, "/orgs/acme/actions/runners/generate-jitconfig"); err != nil {
		t.Fatalf("a registration under a low budget: %v", err)
	}
}
