package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
	reg := prometheus.NewPedanticRegistry()
	limiter, err := httpauth.NewLimiter(httpauth.LimiterOptions{Clock: r.clk, Registry: reg,
		Log: slog.New(slog.NewTextHandler(r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
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
