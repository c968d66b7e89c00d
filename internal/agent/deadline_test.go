package agent_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/agentapi/agentapitest"
	"github.com/bullpen-ci/bullpen/internal/clock"
)

// wantGaveUpAtTheDeadline fails unless clk stands at the deadline after T0,
// when the streak began, or at most a heartbeat past it: the heartbeats
// watch the deadline on their own timer, and may see it first while a
// retry's last try (at the deadline) is on its way.
func wantGaveUpAtTheDeadline(t *testing.T, clk *clock.Virtual, cfg agent.Config) {
	t.Helper()
	got, most := clk.Now().Sub(agentapitest.T0), cfg.UnreachableDeadline+cfg.HeartbeatEvery
	if got < cfg.UnreachableDeadline || got > most {
		t.Fatalf("gave up %s after the control plane went, want between %s and %s", got, cfg.UnreachableDeadline, most)
	}
}

// Answers that are not the control plane's own (a proxy's page, whatever
// its status) say only that the control plane is out of reach: the agent
// retries them and gives the machine up at the deadline, rather than
// exiting as if it were refused and being restarted forever.
func TestAProxysPageCountsAsUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
		saved                   bool // the agent has its token: it heartbeats and polls
	}{
		{"an HTML 404", "text/html", "<html><body>Not Found</body></html>", http.StatusNotFound, false},
		{"an HTML 403", "text/html", "<html><body>Forbidden</body></html>", http.StatusForbidden, false},
		{"an auth wall's 401", "text/plain", "Unauthorized", http.StatusUnauthorized, false},
		{"an API-like body that is not JSON by its type", "text/plain", `{"error":"taken","code":"token_issued"}`, http.StatusConflict, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			t.Cleanup(proxy.Close)
			cfg := r.config("bp-1", "secret")
			cfg.URL = proxy.URL
			if tc.saved {
				os.MkdirAll(cfg.StateDir, 0o700)
				os.WriteFile(filepath.Join(cfg.StateDir, "identity.json"), []byte(`{"cloud_id":"i-bp-1","token":"tok"}`), 0o600)
			}
			clk := clock.NewVirtual(agentapitest.T0)
			g := r.start(cfg, clk, proxy.Client())
			if _, err := stepUntilDone(t, clk, g); !errors.Is(err, agent.ErrUnreachable) {
				t.Fatalf("Run: %v, want ErrUnreachable", err)
			}
			wantGaveUpAtTheDeadline(t, clk, cfg)
		})
	}
}
