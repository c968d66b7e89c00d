package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/autoscale/appplatform"
)

// `autoscale run`'s /healthz follows the cycles: 503 with one line once
// they have failed appplatform.UnhealthyAfter times in a row, ok again
// after one that succeeds.
func TestAutoscaleHealthzFollowsTheCycles(t *testing.T) {
	health := &appplatform.Health{}
	mux := autoscaleMux(prometheus.NewRegistry(), health)
	get := func() (int, string) {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return w.Code, w.Body.String()
	}
	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	refused := errors.New("get app 1234: DigitalOcean answered 401 Unauthorized")
	for i := range appplatform.UnhealthyAfter {
		if code, body := get(); code != http.StatusOK || body != "ok\n" {
			t.Fatalf("after %d failed cycles: %d %q, want ok", i, code, body)
		}
		health.Observe(appplatform.CycleReport{At: at.Add(time.Duration(i) * time.Minute)}, refused)
	}
	code, body := get()
	if code != http.StatusServiceUnavailable || strings.Count(body, "\n") != 1 ||
		!strings.Contains(body, "3 cycles in a row failed") || !strings.Contains(body, "401 Unauthorized") {
		t.Fatalf("after %d failed cycles: %d %q, want 503 and one line with the reason", appplatform.UnhealthyAfter, code, body)
	}
	health.Observe(appplatform.CycleReport{At: at.Add(time.Hour)}, nil)
	if code, body := get(); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("after a good cycle: %d %q, want ok", code, body)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("/metrics: %d", w.Code)
	}
}
