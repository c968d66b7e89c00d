package agent_test

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agentapi/agentapitest"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// With the control plane gone, the agent retries with exponential backoff
// (1 s doubling to 30 s) and, once it has been unreachable for the
// deadline, runs the shutdown command and stops.
func TestBackoffThenSelfShutdown(t *testing.T) {
	r := newRig(t)
	clk, g := r.startAgainst(r.config("bp-1", "secret"), closedServer())

	steps, err := stepUntilDone(t, clk, g)
	if !errors.Is(err, agent.ErrUnreachable) {
		t.Fatalf("Run: %v, want ErrUnreachable", err)
	}
	if _, err := os.Stat(r.path("halted")); err != nil {
		t.Fatal("the shutdown command did not run")
	}
	if got := clk.Now().Sub(agentapitest.T0); got != agent.DefaultUnreachableDeadline {
		t.Fatalf("shut down after %s, want %s", got, agent.DefaultUnreachableDeadline)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}
	for range 38 {
		want = append(want, 30*time.Second)
	}
	want = append(want, 29*time.Second) // the last try lands on the deadline
	if !slices.Equal(steps, want) {
		t.Fatalf("backoff steps %v, want %v", steps, want)
	}
}

// The saved token is the instance's identity across restarts: a second
// run (a stopped and started machine) neither says hello again nor needs
// the bootstrap secret, and still serves jobs.
func TestTokenSurvivesARestart(t *testing.T) {
	r := newRig(t)
	cp := r.cp
	cfg := r.launched("bp-1")
	first := r.run(cfg)
	cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalWarm))
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(cfg.StateDir, "identity.json")
	for path, mode := range map[string]os.FileMode{file: 0o600, cfg.StateDir: 0o700 | os.ModeDir} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != mode {
			t.Fatalf("%s has mode %s, want %s", path, st.Mode(), mode)
		}
	}
	var saved struct {
		Token      string `json:"token"`
		InstanceID string `json:"instance_id"`
		CloudID    string `json:"cloud_id"`
	}
	data, _ := os.ReadFile(file)
	if err := json.Unmarshal(data, &saved); err != nil {
		t.Fatal(err)
	}
	if domain.HashSecret(saved.Token) != cp.Get("bp-1").AgentTokenHash || saved.InstanceID != "bp-1" || saved.CloudID != "i-bp-1" {
		t.Fatalf("saved identity %+v does not match the row", saved)
	}

	cfg.LaunchID, cfg.Bootstrap = "", ""
	beats := cp.Calls.Count(agentapitest.IsOp("heartbeat"))
	second := r.run(cfg)
	cp.Calls.Await(t, beats+1, agentapitest.IsOp("heartbeat"))
	cp.Assign("bp-1", 101, "jit")
	if err := result(t, second); !errors.Is(err, agent.ErrInstanceEnded) {
		t.Fatalf("second run: %v, want the instance to end after its job", err)
	}
	if n := cp.Calls.Count(agentapitest.IsSignal(domain.SignalJobFinished)); n != 1 {
		t.Fatalf("%d job-finished signals", n)
	}
	if n := r.hitsOf(agentapi.PathHello); n != 1 {
		t.Fatalf("%d hellos, want 1", n)
	}
}

// A saved token of another machine (a state directory baked into an
// image) is not used.
func TestSavedTokenOfAnotherMachineIsIgnored(t *testing.T) {
	r := newRig(t)
	cp := r.cp
	cfg := r.launched("bp-2")
	os.MkdirAll(cfg.StateDir, 0o700)
	os.WriteFile(filepath.Join(cfg.StateDir, "identity.json"), []byte(`{"cloud_id":"i-bp-1","token":"abc"}`), 0o600)
	r.run(cfg)
	cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalWarm))
	if n := r.hitsOf(agentapi.PathHello); n != 1 {
		t.Fatalf("%d hellos, want 1", n)
	}
}

func TestRefusedCredentialsStopTheAgent(t *testing.T) {
	r := newRig(t)
	cp := r.cp
	cp.Launch("bp-1", domain.StateBooting, domain.NewSecret())
	g := r.run(r.config("bp-1", "not-the-secret"))
	if err := result(t, g); !errors.Is(err, agent.ErrUnauthorized) {
		t.Fatalf("Run: %v, want ErrUnauthorized", err)
	}
	if n := r.hitsOf(agentapi.PathHello); n != 1 {
		t.Fatalf("%d hellos: a refused hello must not be retried", n)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "state-bp-1", "identity.json")); err == nil {
		t.Fatal("an identity was saved")
	}
}

// A transient failure is retried; a rejection (409) never is, and the
// agent carries on with its work.
func TestRejectedSignalsAreNotRetried(t *testing.T) {
	r := newRig(t)
	stub, srv := newStubPlane(t, &agentapi.Instruction{Kind: "run", JobID: 5, Job: "5", JITConfig: "x"}, func(kind string, n int) int {
		if kind == "warm" && n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusConflict
	})
	clk, _ := r.startAgainst(r.config("bp-1", "secret"), srv)

	stub.await(t, "warm", func() bool { return stub.signals["warm"] == 1 })
	// The heartbeat's interval and the warm signal's backoff, unless the
	// first heartbeat, sent after the refusal, ended the backoff at once.
	if parkedOr(clk, 2, stub.reached(t, func() bool { return stub.signals["warm"] == 2 })) {
		clk.Advance(time.Second)
	}
	stub.await(t, "the next poll", func() bool { return stub.nexts == 2 }) // the job was served, the agent asks again
	want := map[string]int{"warm": 2, "registered": 1, "job-started": 1, "job-finished": 1}
	stub.read(func() {
		if !maps.Equal(stub.signals, want) {
			t.Fatalf("signals %v, want %v", stub.signals, want)
		}
	})
}

// A hello whose answer is lost on the way back (the control plane issued
// the token, a balancer in between answered 502) is retried with the same
// proposed token and gets it: the agent serves, instead of finding its
// token taken and giving its machine up.
func TestALostHelloAnswerIsRetried(t *testing.T) {
	r := newRig(t)
	clk, _ := r.startAgainst(r.launched("bp-1"), r.lossyHelloFront(t))
	clk.BlockUntil(1) // the hello's backoff
	clk.Advance(time.Second)
	r.cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalWarm))
	if n := r.hitsOf(agentapi.PathHello); n != 2 {
		t.Fatalf("%d hellos reached the control plane, want the lost one and its retry", n)
	}
	if in := r.cp.Get("bp-1"); in.AgentTokenHash == "" {
		t.Fatal("no token on the row")
	}
}
