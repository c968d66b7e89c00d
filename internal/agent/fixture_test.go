package agent_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agentapi/agentapitest"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// rig is a control plane (the real agent API, agents.Service and SQLite
// store, on a virtual clock) served on 127.0.0.1, and a directory with a
// fake runner for agents to run.
type rig struct {
	t    *testing.T
	cp   *agentapitest.ControlPlane
	srv  *httptest.Server
	dir  string
	logs *testlog.Buffer // every agent's log, at debug level

	mu   sync.Mutex
	hits map[string]int // requests by path
}

// fakeRunner records its config, says its job started and exits with
// $FAKE_EXIT; blockingRunner says its job started and never ends.
const (
	fakeRunner = `#!/bin/sh
printf '%s\n' "$1" >> "$(dirname "$0")/jit.log"
echo "Listening for Jobs"
echo "Running job: build"
exit "${FAKE_EXIT:-0}"
`
	blockingRunner = `#!/bin/sh
echo "Running job: build"
exec sleep 1000
`
)

func newRig(t *testing.T) *rig {
	t.Helper()
	t.Parallel()
	r := &rig{t: t, cp: agentapitest.New(t), dir: t.TempDir(), logs: &testlog.Buffer{}, hits: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.hits[req.URL.Path]++
		r.mu.Unlock()
		r.cp.Server.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	r.write("runner.sh", fakeRunner)
	r.write("blocking-runner.sh", blockingRunner)
	return r
}

func (r *rig) write(name, content string) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, name), []byte(content), 0o755); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) path(name string) string { return filepath.Join(r.dir, name) }

func (r *rig) hitsOf(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits[path]
}

// lines returns a file's lines; none if it does not exist.
func (r *rig) lines(name string) []string {
	r.t.Helper()
	data, err := os.ReadFile(r.path(name))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// config is an agent's configuration for the instance launched as id with
// secret, running the fake runner.
func (r *rig) config(id, secret string) agent.Config {
	cfg := agent.Defaults()
	cfg.URL, cfg.LaunchID, cfg.Bootstrap, cfg.CloudID = r.srv.URL, "lt-"+id, secret, "i-"+id
	cfg.StateDir = filepath.Join(r.dir, "state-"+id)
	cfg.RunnerCommand = "sh " + agent.ShellQuote(r.path("runner.sh")) + " " + agent.JITConfigPlaceholder
	cfg.CleanupCommand = "echo cleaned >> " + agent.ShellQuote(r.path("cleanup.log"))
	cfg.ShutdownCommand = "touch " + agent.ShellQuote(r.path("halted"))
	return cfg
}

// launched writes the row of a booting machine launched as id with a new
// bootstrap secret, and returns its agent's configuration, which holds the
// secret.
func (r *rig) launched(id string) agent.Config {
	r.t.Helper()
	secret := domain.NewSecret()
	r.cp.Launch(id, domain.StateBooting, secret)
	return r.config(id, secret)
}

// servingOnce waits for id's agent to say its machine is warm, then
// assigns it job jobID with runner config jit.
func (r *rig) servingOnce(id string, jobID int64, jit string) {
	r.t.Helper()
	r.cp.Calls.Await(r.t, 1, agentapitest.IsSignal(domain.SignalWarm))
	r.cp.Assign(id, jobID, jit)
}

// running is an agent run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned err
	err    error
}

// stop ends the run and returns what Run returned.
func (g *running) stop() error {
	g.cancel()
	<-g.done
	return g.err
}

// start runs an agent on clk until the test ends (or stop).
func (r *rig) start(cfg agent.Config, clk *clock.Virtual, hc *http.Client) *running {
	r.t.Helper()
	a, err := agent.New(cfg, agent.Deps{
		Clock: clk, HTTP: hc, Commands: agent.Exec{Grace: time.Second},
		Log:    slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Output: r.logs, Jitter: func(d time.Duration) time.Duration { return d },
	})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		g.err = a.Run(ctx)
	}()
	r.t.Cleanup(func() { g.stop() })
	return g
}

// run starts an agent against the rig's control plane.
func (r *rig) run(cfg agent.Config) *running {
	return r.start(cfg, r.cp.Clock, r.srv.Client())
}

// startAgainst starts an agent with cfg against srv instead (its URL, over
// its client) on a virtual clock of its own, set at T0.
func (r *rig) startAgainst(cfg agent.Config, srv *httptest.Server) (*clock.Virtual, *running) {
	cfg.URL = srv.URL
	clk := clock.NewVirtual(agentapitest.T0)
	return clk, r.start(cfg, clk, srv.Client())
}

// closedServer is a control plane that is gone: nothing listens at its
// URL any more.
func closedServer() *httptest.Server {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv
}

// result waits for a run to end by itself.
func result(t *testing.T, g *running) error {
	t.Helper()
	select {
	case <-g.done:
		return g.err
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop")
		return nil
	}
}

// stepUntilDone moves clk from timer to timer (each waiting for the agent to
// park on one) until the run ends, and returns the steps taken.
func stepUntilDone(t *testing.T, clk *clock.Virtual, g *running) ([]time.Duration, error) {
	t.Helper()
	var steps []time.Duration
	for len(steps) < 10000 {
		if !parkOrDone(clk, g) {
			return steps, g.err
		}
		next, _ := clk.Next()
		steps = append(steps, next.Sub(clk.Now()))
		clk.AdvanceTo(next)
	}
	t.Fatal("the agent never stopped")
	return nil, nil
}

type agentapitestCall = agentapitest.Call

// lossyHelloFront stands between the agent and the rig's control plane and
// loses the answer to the first hello: the control plane issues the token,
// the agent gets a balancer's 502.
func (r *rig) lossyHelloFront(t *testing.T) *httptest.Server {
	var lost atomic.Bool
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == agentapi.PathHello && lost.CompareAndSwap(false, true) {
			r.srv.Config.Handler.ServeHTTP(httptest.NewRecorder(), req)
			http.Error(w, "upstream connection reset", http.StatusBadGateway)
			return
		}
		r.srv.Config.Handler.ServeHTTP(w, req)
	}))
	t.Cleanup(front.Close)
	return front
}

// parkOrDone waits for the agent to park on a timer of clk, and reports
// false if its run ended instead.
func parkOrDone(clk *clock.Virtual, g *running) bool {
	parked := make(chan struct{})
	go func() {
		clk.BlockUntil(1)
		close(parked)
	}()
	select {
	case <-g.done:
		clk.AfterFunc(time.Hour, func() {}) // releases the BlockUntil above
		return false
	case <-parked:
		return true
	}
}
