package agent_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agentapi/agentapitest"
	"github.com/bullpen-ci/bullpen/internal/clock"
)

// idleRunner registers and waits for a job that never comes (it was
// cancelled before pickup, or another runner took it).
const idleRunner = `#!/bin/sh
echo "Listening for Jobs"
exec sleep 1000
`

// behindBalancer is a stub plane giving job 5, served through front until
// gone is set, when front answers every call as a balancer without a
// healthy upstream does. With goAfterJob, gone is set once the stub has
// given the agent its job.
func behindBalancer(t *testing.T, goAfterJob bool) (stub *stubPlane, gone *atomic.Bool, front *httptest.Server) {
	stub, _ = newStubPlane(t, &agentapi.Instruction{Kind: "run", JobID: 5, Job: "5", JITConfig: "x"}, nil)
	gone = new(atomic.Bool)
	front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if gone.Load() {
			http.Error(w, "no healthy upstream", http.StatusBadGateway)
			return
		}
		stub.ServeHTTP(w, req)
		if goAfterJob && req.URL.Path == agentapi.PathNext {
			gone.Store(true)
		}
	}))
	t.Cleanup(front.Close)
	return stub, gone, front
}

// stepTo moves clk from timer to timer (each waiting for the agent to park
// on one) until it reaches until; the agent must not stop meanwhile.
func stepTo(t *testing.T, clk *clock.Virtual, g *running, until time.Time) {
	t.Helper()
	for clk.Now().Before(until) {
		if !parkOrDone(clk, g) {
			t.Fatalf("the agent stopped at %s: %v", clk.Now(), g.err)
		}
		next, _ := clk.Next()
		clk.AdvanceTo(next)
	}
}

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

// A runner waiting for a job that never starts is no reason to stay: with
// the control plane gone, the machine shuts down at the deadline.
func TestAnIdleRunnerDoesNotHoldTheDeadlineOff(t *testing.T) {
	r := newRig(t)
	r.write("idle-runner.sh", idleRunner)
	// The control plane goes as soon as it has given the job.
	_, _, front := behindBalancer(t, true)
	cfg := r.config("bp-1", "secret")
	cfg.RunnerCommand = "sh " + agent.ShellQuote(r.path("idle-runner.sh")) + " " + agent.JITConfigPlaceholder
	clk, g := r.startAgainst(cfg, front)
	// The heartbeats wait for their next turn and the registered signal for
	// its retry: the agent heard the last answers, and its first failure
	// began the streak now.
	clk.BlockUntil(2)

	if _, err := stepUntilDone(t, clk, g); !errors.Is(err, agent.ErrUnreachable) {
		t.Fatalf("Run: %v, want ErrUnreachable", err)
	}
	if _, err := os.Stat(r.path("halted")); err != nil {
		t.Fatal("the shutdown command did not run")
	}
	wantGaveUpAtTheDeadline(t, clk, cfg)
}

// A started job does not need the control plane: the deadline waits for it.
// Its loss and its return are each logged once, at WARN, however many
// heartbeats fail in between; the kept streak goes with the outage.
func TestAStartedJobHoldsTheDeadlineOff(t *testing.T) {
	r := newRig(t)
	stub, gone, front := behindBalancer(t, false)
	cfg := r.config("bp-1", "secret")
	cfg.RunnerCommand = "sh " + agent.ShellQuote(r.path("blocking-runner.sh")) + " " + agent.JITConfigPlaceholder
	clk, g := r.startAgainst(cfg, front)
	stub.await(t, "job-started", func() bool { return stub.signals["job-started"] == 1 })
	gone.Store(true)

	stepTo(t, clk, g, clk.Now().Add(2*cfg.UnreachableDeadline))
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "unreachable.json")); err != nil {
		t.Fatalf("the streak is not kept: %v", err)
	}
	gone.Store(false)
	var beats int
	stub.read(func() { beats = stub.beats })
	next, _ := clk.Next()
	clk.AdvanceTo(next)
	stub.await(t, "a heartbeat", func() bool { return stub.beats > beats })
	clk.BlockUntil(1) // the agent logged the answer and waits for the next heartbeat

	logs := r.logs.String()
	for _, line := range []string{"level=WARN msg=\"the control plane does not answer heartbeats", "level=WARN msg=\"the control plane answers heartbeats again"} {
		if n := strings.Count(logs, line); n != 1 {
			t.Fatalf("%q logged %d times, want once:\n%s", line, n, logs)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "unreachable.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the streak is still kept after the control plane answered: %v", err)
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
		{"a captive portal's 200", "text/html", "<html><body>Sign in</body></html>", http.StatusOK, true},
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
			if tc.saved {
				os.MkdirAll(cfg.StateDir, 0o700)
				os.WriteFile(filepath.Join(cfg.StateDir, "identity.json"), []byte(`{"cloud_id":"i-bp-1","token":"tok"}`), 0o600)
			}
			clk, g := r.startAgainst(cfg, proxy)
			if _, err := stepUntilDone(t, clk, g); !errors.Is(err, agent.ErrUnreachable) {
				t.Fatalf("Run: %v, want ErrUnreachable", err)
			}
			wantGaveUpAtTheDeadline(t, clk, cfg)
		})
	}
}

// An agent restarted during an outage (after a crash, or by systemd after
// an error) goes on counting from the streak's start, so restarts cannot
// keep an abandoned machine alive.
func TestARestartDoesNotResetTheDeadline(t *testing.T) {
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err != nil {
		t.Skip("no boot id on this system: streaks are not resumed")
	}
	r := newRig(t)
	gone := closedServer()
	cfg := r.config("bp-1", "secret")
	// The second run, on the same clock, goes there too.
	cfg.URL = gone.URL
	clk := clock.NewVirtual(agentapitest.T0)
	first := r.start(cfg, clk, gone.Client())
	stepTo(t, clk, first, agentapitest.T0.Add(15*time.Minute))
	if err := first.stop(); err != nil {
		t.Fatalf("first run: %v", err)
	}

	second := r.start(cfg, clk, gone.Client())
	if _, err := stepUntilDone(t, clk, second); !errors.Is(err, agent.ErrUnreachable) {
		t.Fatalf("Run: %v, want ErrUnreachable", err)
	}
	if got := clk.Now().Sub(agentapitest.T0); got != cfg.UnreachableDeadline {
		t.Fatalf("gave up %s after the first failure, want %s", got, cfg.UnreachableDeadline)
	}
}

// A streak kept in another boot (the machine was stopped during an outage
// and started later) is not resumed: the new boot gets its full deadline.
func TestAStreakOfAnotherBootIsNotResumed(t *testing.T) {
	r := newRig(t)
	cfg := r.config("bp-1", "secret")
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := `{"since":"` + agentapitest.T0.Add(-time.Hour).Format(time.RFC3339) + `","boot_id":"another-boot"}`
	if err := os.WriteFile(filepath.Join(cfg.StateDir, "unreachable.json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	clk, g := r.startAgainst(cfg, closedServer())
	if _, err := stepUntilDone(t, clk, g); !errors.Is(err, agent.ErrUnreachable) {
		t.Fatalf("Run: %v, want ErrUnreachable", err)
	}
	if got := clk.Now().Sub(agentapitest.T0); got != cfg.UnreachableDeadline {
		t.Fatalf("gave up after %s, want %s", got, cfg.UnreachableDeadline)
	}
}
