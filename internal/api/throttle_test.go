package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/dashboard"
	"github.com/bullpen-ci/bullpen/internal/httpauth"
	"github.com/bullpen-ci/bullpen/internal/promtest"
)

// getFrom requests path from the address remote with the given
// Authorization header ("" for none).
func (r *rig) getFrom(remote, path, authorization string) *httptest.ResponseRecorder {
	r.t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = remote
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	rec := httptest.NewRecorder()
	r.srv.Handler().ServeHTTP(rec, req)
	return rec
}

func TestGuessingTheTokenIsThrottledPerAddress(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	limiter, reg := r.limiter()
	r.srv.Limiter = limiter
	const guesser, other = "192.0.2.7:40000", "192.0.2.8:40000"
	for range 3 * httpauth.DefaultFailures {
		r.wantError(r.getFrom(guesser, "/api/v1/jobs", ""), http.StatusUnauthorized) // no guess, no count
	}
	for range httpauth.DefaultFailures {
		r.wantError(r.getFrom(guesser, "/api/v1/jobs", "Bearer guess-0000000"), http.StatusUnauthorized)
	}
	rec := r.getFrom(guesser, "/api/v1/jobs", "Bearer "+adminToken)
	r.wantError(rec, http.StatusTooManyRequests, "too many wrong tokens", "try again in 60 s")
	if got := rec.Header().Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After %q, want 60", got)
	}
	if strings.Contains(rec.Body.String(), "acme/app") {
		t.Error("a throttled request saw data")
	}
	if rec := r.getFrom(other, "/api/v1/jobs", "Bearer "+adminToken); rec.Code != http.StatusOK {
		t.Errorf("another address: %d, want 200", rec.Code)
	}
	r.clk.Advance(httpauth.DefaultWindow)
	if rec := r.getFrom(guesser, "/api/v1/jobs", "Bearer "+adminToken); rec.Code != http.StatusOK {
		t.Errorf("once the window passed: %d, want 200", rec.Code)
	}
	refused := func(reason string) float64 { return refusedCount(t, reg, "api", reason) }
	if refused("wrong_token") != float64(httpauth.DefaultFailures) || refused("throttled") != 1 {
		t.Errorf("refused: wrong_token %v, throttled %v; want %d and 1", refused("wrong_token"), refused("throttled"), httpauth.DefaultFailures)
	}
	if got := r.logs.Lines("level=WARN", "too many wrong tokens", "remote=192.0.2.7", "surface=api"); len(got) != 1 {
		t.Errorf("WARN lines %q, want one", got)
	}
	if strings.Contains(r.logs.String(), adminToken) || strings.Contains(r.logs.String(), "guess-0000000") {
		t.Errorf("a token reached the log:\n%s", r.logs)
	}
}

// refusedCount reads bullpen_auth_refused_total for surface and reason
// from reg.
func refusedCount(t *testing.T, reg *prometheus.Registry, surface, reason string) float64 {
	t.Helper()
	return promtest.MustValue(t, reg, "bullpen_auth_refused_total", "surface", surface, "reason", reason)
}

const viewerToken = "viewer-5b1e08c7a9d2f364"

// A viewer's script calling the API with the viewer token is told the
// token does not reach the API, and is not taken for a guesser: were it,
// it would throttle its address on every surface, locking the admin out
// of the API and of the dashboard's login, and the viewer out of the
// dashboard.
func TestTheViewerTokenIsRefusedWithoutCountingAsAGuess(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	limiter, reg := r.limiter()
	r.srv.Limiter, r.srv.ViewerToken = limiter, viewerToken
	dash, err := dashboard.New(dashboard.Options{Store: r.store, Clock: r.clk, AdminToken: adminToken, ViewerToken: viewerToken,
		Limiter: limiter, Log: slog.New(slog.NewTextHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	const remote = "192.0.2.7:40000"
	for range httpauth.DefaultFailures {
		rec := r.getFrom(remote, "/api/v1/jobs", "Bearer "+viewerToken)
		r.wantError(rec, http.StatusForbidden, "viewer token", "dashboard only", "admin token")
		if strings.Contains(rec.Body.String(), "acme/app") {
			t.Fatal("the viewer token read the API")
		}
		if got := rec.Header().Get("WWW-Authenticate"); !strings.Contains(got, "insufficient_scope") {
			t.Errorf("WWW-Authenticate %q, want insufficient_scope", got)
		}
	}
	if rec := r.getFrom(remote, "/api/v1/jobs", "Bearer "+adminToken); rec.Code != http.StatusOK {
		t.Errorf("the admin token on the API after the viewer's calls: %d %s, want 200", rec.Code, rec.Body)
	}
	login := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {adminToken}}.Encode()))
	login.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	login.RemoteAddr = remote
	rec := httptest.NewRecorder()
	dash.ServeHTTP(rec, login)
	if rec.Code != http.StatusSeeOther {
		t.Errorf("the admin's login after the viewer's calls: %d, want 303", rec.Code)
	}
	page := httptest.NewRequest(http.MethodGet, "/jobs", nil)
	page.Header.Set("Authorization", "Bearer "+viewerToken)
	page.RemoteAddr = remote
	rec = httptest.NewRecorder()
	dash.ServeHTTP(rec, page)
	if rec.Code != http.StatusOK {
		t.Errorf("the viewer's bearer on the dashboard after its calls: %d, want 200", rec.Code)
	}
	for _, surface := range []string{"api", "dashboard_login", "dashboard_bearer"} {
		for _, reason := range []string{"wrong_token", "throttled"} {
			if got := refusedCount(t, reg, surface, reason); got != 0 {
				t.Errorf("refused %s %s = %v, want 0", surface, reason, got)
			}
		}
	}
	if strings.Contains(r.logs.String(), viewerToken) || strings.Contains(r.logs.String(), adminToken) {
		t.Errorf("a token reached the log:\n%s", r.logs)
	}
}

// Without a limiter the viewer token is refused all the same.
func TestTheViewerTokenDoesNotReadTheAPI(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.srv.ViewerToken = viewerToken
	for _, p := range paths {
		rec := r.getAs(p, "Bearer "+viewerToken)
		r.wantError(rec, http.StatusForbidden, "viewer token")
		if strings.Contains(rec.Body.String(), "acme/app") || strings.Contains(rec.Body.String(), viewerToken) {
			t.Errorf("%s: %s", p, rec.Body)
		}
	}
}

// limiter is a login throttle on the rig's clock and log, with its metrics
// on a registry of its own.
func (r *rig) limiter() (*httpauth.Limiter, *prometheus.Registry) {
	r.t.Helper()
	reg := prometheus.NewPedanticRegistry()
	limiter, err := httpauth.NewLimiter(httpauth.LimiterOptions{Clock: r.clk, Registry: reg,
		Log: slog.New(slog.NewTextHandler(r.logs, nil))})
	if err != nil {
		r.t.Fatal(err)
	}
	return limiter, reg
}
