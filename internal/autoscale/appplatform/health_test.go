package appplatform

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func healthz(t *testing.T, h *Health) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return w.Code, w.Body.String()
}

// /healthz answers 503 with one line once UnhealthyAfter cycles in a row
// have failed, and ok again after a cycle that did not.
func TestHealthFollowsConsecutiveFailedCycles(t *testing.T) {
	r := newRig(t, nil)
	h := &Health{}
	r.do.FailNext("GET", 500, UnhealthyAfter)
	for i := 1; i <= UnhealthyAfter; i++ {
		rep, err := r.advanceCycle(time.Minute)
		if err == nil {
			t.Fatalf("cycle %d did not fail", i)
		}
		h.Observe(rep, err)
		code, body := healthz(t, h)
		if i < UnhealthyAfter && (code != http.StatusOK || body != "ok\n") {
			t.Fatalf("after %d failed cycles: %d %q, want ok", i, code, body)
		}
		if i == UnhealthyAfter {
			want := "unhealthy: 3 cycles in a row failed, the last at 2026-03-02T09:03:00Z: "
			if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, want) ||
				!strings.Contains(body, "DigitalOcean answered 500") || strings.Count(body, "\n") != 1 {
				t.Fatalf("after %d failed cycles: %d %q, want 503 and one line starting %q", i, code, body, want)
			}
			r.noSecrets(body)
		}
	}
	rep, err := r.advanceCycle(time.Minute)
	h.Observe(rep, err)
	if code, body := healthz(t, h); err != nil || code != http.StatusOK || body != "ok\n" {
		t.Fatalf("after a good cycle (err %v): %d %q, want ok", err, code, body)
	}
}
