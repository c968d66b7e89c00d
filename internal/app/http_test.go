package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

// notServed is what an address says of a path it does not serve.
const notServed = "not served on this address"

func serve(h http.Handler, method, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.Header.Set("Authorization", "Bearer token")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// Split, the public address serves GitHub and the agents only, and the
// admin address the operator's surfaces only; each answers the other's
// paths with a plain 404 that is neither the dashboard's page nor a
// pointer to the other address.
func TestSplitHandlersServeEachPathOnItsOwnAddress(t *testing.T) {
	a := newApp(t, app.Options{})
	public, admin := a.Handlers(true)
	if public == nil || admin == nil {
		t.Fatalf("split handlers: public %v, admin %v", public, admin)
	}
	for _, tc := range []struct {
		method, path string
		public       bool // served on the public address, else on the admin one
	}{
		{http.MethodPost, "/webhook", true},
		{http.MethodGet, "/agent/v1/next", true},
		{http.MethodPost, "/agent/v1/hello", true},
		{http.MethodGet, "/api", false},
		{http.MethodGet, "/api/v1/pools", false},
		{http.MethodGet, "/api/v1/jobs", false},
		{http.MethodGet, "/", false},
		{http.MethodGet, "/login", false},
		{http.MethodGet, "/jobs", false},
		{http.MethodGet, "/assets/style.css", false},
		{http.MethodGet, "/metrics", false},
		{http.MethodGet, "/no/such/page", false},
	} {
		serving, other, otherName := admin, public, "public"
		if tc.public {
			serving, other, otherName = public, admin, "admin"
		}
		if rec := serve(serving, tc.method, tc.path); strings.Contains(rec.Body.String(), notServed) {
			t.Errorf("%s %s is not served where it belongs: %d %q", tc.method, tc.path, rec.Code, rec.Body)
		}
		rec := serve(other, tc.method, tc.path)
		body := rec.Body.String()
		if !tc.public && strings.HasPrefix(tc.path, "/api") {
			continue // the public address's answer is the next test's
		}
		if rec.Code != http.StatusNotFound || !strings.Contains(body, notServed) || strings.Contains(body, "<") ||
			!strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
			t.Errorf("%s %s on the %s address: %d %q, want a plain 404 saying it is %s", tc.method, tc.path, otherName, rec.Code, body, notServed)
		}
		if strings.Contains(body, "admin") || strings.Contains(body, "listen") {
			t.Errorf("%s %s on the %s address tells where it is served: %q", tc.method, tc.path, otherName, body)
		}
	}
	for name, h := range map[string]http.Handler{"public": public, "admin": admin} {
		if rec := serve(h, http.MethodGet, "/healthz"); rec.Code != http.StatusOK {
			t.Errorf("GET /healthz on the %s address: %d %q", name, rec.Code, rec.Body)
		}
		if rec := serve(h, http.MethodPost, "/healthz"); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("POST /healthz on the %s address: %d, Allow %q", name, rec.Code, rec.Header().Get("Allow"))
		}
	}
}

// The status API's paths on the public address are answered in the API's
// JSON error shape, saying the API is served on the operators' address,
// so that a client pointed there says what to do; the address itself is
// not named.
func TestPublicAddressSaysWhereTheStatusAPIIs(t *testing.T) {
	a := newApp(t, app.Options{})
	public, _ := a.Handlers(true)
	for _, path := range []string{"/api", "/api/", "/api/v1/pools", "/api/v1/jobs?state=queued"} {
		rec := serve(public, http.MethodGet, path)
		var e struct{ Error string }
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusNotFound ||
			rec.Header().Get("Content-Type") != "application/json" || !strings.Contains(e.Error, "--admin-listen") {
			t.Errorf("GET %s on the public address: %d %q (%s), want a JSON 404 naming --admin-listen", path, rec.Code, rec.Body, rec.Header().Get("Content-Type"))
		}
		if strings.Contains(e.Error, "127.0.0.1") || strings.Contains(e.Error, ":80") {
			t.Errorf("GET %s on the public address names an address: %q", path, e.Error)
		}
	}
}

// Not split, one handler serves every path, as Handler does.
func TestUnsplitHandlersServeEverythingOnOneAddress(t *testing.T) {
	a := newApp(t, app.Options{})
	public, admin := a.Handlers(false)
	if admin != nil {
		t.Fatalf("an admin handler %v without the split", admin)
	}
	for _, path := range []string{"/metrics", "/api/v1/pools", "/assets/style.css", "/healthz"} {
		if rec := serve(public, http.MethodGet, path); rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d %q", path, rec.Code, rec.Body)
		}
	}
	if rec := serve(public, http.MethodGet, "/healthz"); !strings.Contains(rec.Body.String(), `"loops"`) {
		t.Errorf("GET /healthz on the one address: %q, want the full report", rec.Body)
	}
}

// failingStore is a store whose pool statuses cannot be read, with an
// error that describes the install.
type failingStore struct{ domain.Store }

const storeTrouble = "open /var/lib/bullpen/bullpen.db: disk I/O error"

func (failingStore) ListPoolStatus(context.Context) ([]domain.PoolStatus, error) {
	return nil, errors.New(storeTrouble)
}

// runFailingLoop makes a's loops, on a clock of their own, one loop whose
// steps all fail (GitHub down), run until it has failed often enough to
// be unhealthy.
func runFailingLoop(t *testing.T, a *app.App) {
	t.Helper()
	clk := clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	runner, err := loop.NewRunner(clk, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Loops = runner
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	failing := loop.Loop{Name: "reconciler", Step: func(context.Context) error { return errors.New(githubTrouble) }}
	go func() { done <- runner.Run(ctx, failing) }()
	t.Cleanup(func() { stop(); <-done })
	// Each failure is noted before the runner waits out its backoff.
	for range loop.DefaultUnhealthyAfter - 1 {
		clk.BlockUntil(1)
		clk.Advance(loop.DefaultMaxBackoff)
	}
	clk.BlockUntil(1)
}

const githubTrouble = "GET https://api.github.com/app/installations: 502 Bad Gateway"

// The public health check is the public address's readiness, for a load
// balancer: it says only whether this process takes webhooks and agents,
// and stays up while a loop keeps failing or the store fails, which the
// admin one, the full report, says with the loop's and the store's error.
func TestPublicHealthSaysOnlyUpOrDown(t *testing.T) {
	a := newApp(t, app.Options{})
	runProbeLoop(t, a)
	public, admin := a.Handlers(true)
	working := a.Store
	defer func() { a.Store = working }()
	for _, tc := range []struct {
		store     domain.Store
		failLoop  bool
		adminCode int
		adminHas  string
	}{
		{working, false, http.StatusOK, `"name":"probe"`},
		{failingStore{working}, false, http.StatusServiceUnavailable, storeTrouble},
		{working, true, http.StatusServiceUnavailable, githubTrouble},
	} {
		a.Store = tc.store
		if tc.failLoop {
			runFailingLoop(t, a)
		}
		rec := serve(public, http.MethodGet, "/healthz")
		if want := `{"status":"ok"}` + "\n"; rec.Code != http.StatusOK || rec.Body.String() != want || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("public /healthz, store failing %t, a loop failing %t: %d %q (%s), want 200 %q",
				tc.store != working, tc.failLoop, rec.Code, rec.Body, rec.Header().Get("Content-Type"), want)
		}
		if rec := serve(admin, http.MethodGet, "/healthz"); rec.Code != tc.adminCode || !strings.Contains(rec.Body.String(), tc.adminHas) {
			t.Errorf("admin /healthz: %d %q, want %d with %q", rec.Code, rec.Body, tc.adminCode, tc.adminHas)
		}
	}
}

// From the moment a shutdown starts, the public health check answers 503,
// so that a load balancer sends the next requests elsewhere, while the
// address still takes what comes meanwhile.
func TestPublicHealthIsDownOnceDraining(t *testing.T) {
	a := newApp(t, app.Options{})
	runProbeLoop(t, a)
	public, admin := a.Handlers(true)
	a.Draining()
	if rec := serve(public, http.MethodGet, "/healthz"); rec.Code != http.StatusServiceUnavailable || rec.Body.String() != `{"status":"draining"}`+"\n" {
		t.Errorf("public /healthz once draining: %d %q, want 503 draining", rec.Code, rec.Body)
	}
	ping := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
	req := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(ping))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "ping")
	req.Header.Set("X-GitHub-Delivery", "d-draining")
	req.Header.Set("X-Hub-Signature-256", testfixtures.GoSign("secret", ping))
	rec := httptest.NewRecorder()
	public.ServeHTTP(rec, req)
	if rec.Code >= 300 {
		t.Errorf("a delivery while draining: %d %q, want it taken", rec.Code, rec.Body)
	}
	// The full report says so too, with the loops' health as it is.
	if rec := serve(admin, http.MethodGet, "/healthz"); rec.Code != http.StatusServiceUnavailable ||
		!strings.Contains(rec.Body.String(), `"draining":true`) || !strings.Contains(rec.Body.String(), `"healthy":true`) {
		t.Errorf("admin /healthz while draining, loops healthy: %d %q", rec.Code, rec.Body)
	}
}
