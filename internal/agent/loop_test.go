package agent_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/agentapi/agentapitest"
	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// signalsOf lists the signals the control plane accepted from an instance.
func signalsOf(cp *agentapitest.ControlPlane, cloudID string) []string {
	var out []string
	for _, c := range cp.Calls.Calls() {
		if c.Op == "signal" && c.CloudID == cloudID {
			s := string(c.Signal.Kind)
			if c.Signal.Job != "" {
				s += " " + c.Signal.Job
			}
			if c.Err != nil {
				s += " (refused)"
			}
			out = append(out, s)
		}
	}
	return out
}

// The whole life of a reused instance: hello, warm, a job run, released,
// cleaned, deregistered back to the resource pool, and a second job.
func TestRunReleaseReuse(t *testing.T) {
	r := newRig(t)
	cp := r.cp
	cp.SetPolicy(agents.Policy{Reuse: true})
	cfg := r.launched("bp-1")
	g := r.run(cfg)

	cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalWarm))
	if got := cp.Get("bp-1").State; got != domain.StateReady {
		t.Fatalf("after warm: %s, want ready", got)
	}
	// A config with quotes and spaces reaches the runner as one argument.
	jits := []string{`jit one 'quoted' "x" $HOME ; exit 9`, "jit-two"}
	cp.Assign("bp-1", 101, jits[0])
	cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalDeregistered))
	in := cp.Get("bp-1")
	if in.State != domain.StateReady || in.JobsServed != 1 || in.Job != "" {
		t.Fatalf("after the first job: %s, %d served, job %q; want ready, 1, none", in.State, in.JobsServed, in.Job)
	}
	if pool := cp.ResourcePool("small"); len(pool) != 1 || pool[0].InstanceID != "bp-1" {
		t.Fatalf("resource pool: %+v", pool)
	}

	cp.Assign("bp-1", 102, jits[1])
	cp.Calls.Await(t, 2, agentapitest.IsSignal(domain.SignalDeregistered))
	if in := cp.Get("bp-1"); in.State != domain.StateReady || in.JobsServed != 2 {
		t.Fatalf("after the second job: %s, %d served", in.State, in.JobsServed)
	}
	if err := g.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	want := []string{"warm", "registered 101", "job-started 101", "job-finished 101", "deregistered",
		"registered 102", "job-started 102", "job-finished 102", "deregistered"}
	if got := signalsOf(cp, "i-bp-1"); !slices.Equal(got, want) {
		t.Fatalf("signals:\n got %q\nwant %q", got, want)
	}
	if got := r.lines("jit.log"); !slices.Equal(got, jits) {
		t.Fatalf("the runner got configs %q, want %q", got, jits)
	}
	if got := r.lines("cleanup.log"); len(got) != 2 {
		t.Fatalf("cleanup ran %d times, want 2", len(got))
	}
	if r.hitsOf("/agent/v1/hello") != 1 {
		t.Fatalf("%d hellos", r.hitsOf("/agent/v1/hello"))
	}
	wantNoCredentials(t, r, "bp-1", cfg.Bootstrap, jits...)
}

// wantNoCredentials fails if the agents' logs or output hold the instance's
// token, the bootstrap secret or a runner config.
func wantNoCredentials(t *testing.T, r *rig, id, secret string, jits ...string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(r.dir, "state-"+id, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var saved struct{ Token string }
	if err := json.Unmarshal(data, &saved); err != nil || saved.Token == "" {
		t.Fatalf("saved identity %v", err)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "runner started") {
		t.Fatalf("nothing logged to check:\n%s", logs)
	}
	for _, cred := range append([]string{saved.Token, secret}, jits...) {
		if strings.Contains(logs, cred) {
			t.Fatalf("a credential is in the agent's log: %.12s…", cred)
		}
	}
}

// A one-job instance is terminated after its job: its agent learns that
// its token expired with it and stops, without shutting the machine down.
func TestOneJobInstanceEndsTheAgent(t *testing.T) {
	r := newRig(t)
	cp := r.cp
	g := r.run(r.launched("bp-1"))
	r.servingOnce("bp-1", 101, "jit")
	if err := result(t, g); !errors.Is(err, agent.ErrInstanceEnded) {
		t.Fatalf("Run: %v, want ErrInstanceEnded", err)
	}
	if got := cp.Get("bp-1").State; got != domain.StateTerminating {
		t.Fatalf("instance is %s, want terminating", got)
	}
	if _, err := os.Stat(r.path("halted")); err == nil {
		t.Fatal("the agent shut the machine down for an ended instance")
	}
	want := []string{"warm", "registered 101", "job-started 101", "job-finished 101"}
	if got := signalsOf(cp, "i-bp-1"); !slices.Equal(got, want) {
		t.Fatalf("signals %q, want %q", got, want)
	}
}

func TestFailedWarmUpIsReported(t *testing.T) {
	r := newRig(t)
	cp := r.cp
	cfg := r.launched("bp-1")
	cfg.WarmUpCommand = "echo warming; exit 3"
	r.run(cfg)
	c := cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalFailed))
	if c.Signal.Reason != "warm-up: exit status 3" || c.Err != nil {
		t.Fatalf("failed signal %+v", c)
	}
	if in := cp.Get("bp-1"); in.State != domain.StateError || in.Reason != "warm-up: exit status 3" {
		t.Fatalf("instance %s (%q), want error", in.State, in.Reason)
	}
	if n := cp.Calls.Count(agentapitest.IsSignal(domain.SignalWarm)); n != 0 {
		t.Fatalf("warm signalled %d times after a failed warm-up", n)
	}
}

// A runner that ends before its job started reports failed, so the job
// goes back to its queue and the instance is not trusted again.
func TestRunnerFailingBeforeItsJob(t *testing.T) {
	r := newRig(t)
	cp := r.cp
	r.write("broken-runner.sh", "#!/bin/sh\necho 'cannot register'\nexit 2\n")
	cfg := r.launched("bp-1")
	cfg.RunnerCommand = "sh " + agent.ShellQuote(r.path("broken-runner.sh")) + " " + agent.JITConfigPlaceholder
	r.run(cfg)
	r.servingOnce("bp-1", 101, "jit")
	c := cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalFailed))
	if c.Signal.Job != "101" || c.Signal.Reason != "runner exited before its job started: exit status 2" {
		t.Fatalf("failed signal %+v", c.Signal)
	}
	if got := cp.Get("bp-1").State; got != domain.StateError {
		t.Fatalf("instance is %s, want error", got)
	}
}

// Stopped mid-job (Ctrl-C, systemd), the agent stops its runner; the next
// run finds the job's mark and reports the job as failed.
func TestAgentStoppedMidJobReportsItAtRestart(t *testing.T) {
	r := newRig(t)
	cp := r.cp
	cfg := r.launched("bp-1")
	cfg.RunnerCommand = "sh " + agent.ShellQuote(r.path("blocking-runner.sh")) + " " + agent.JITConfigPlaceholder
	first := r.run(cfg)
	r.servingOnce("bp-1", 101, "jit")
	cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalJobStarted))
	if err := first.stop(); err != nil {
		t.Fatalf("Run after Ctrl-C: %v, want nil", err)
	}
	if in := cp.Get("bp-1"); in.State != domain.StateRunning || !in.JobStarted {
		t.Fatalf("instance %s (started %t), want running its job", in.State, in.JobStarted)
	}

	r.run(cfg)
	c := cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalFailed))
	if c.Signal.Job != "101" || c.Err != nil {
		t.Fatalf("failed signal %+v", c)
	}
	if got := cp.Get("bp-1").State; got != domain.StateError {
		t.Fatalf("instance is %s, want error", got)
	}
}

// An idle agent learns that its instance ended (the reaper took it) and
// stops, as virtual time passes: from its next long poll, which reads the
// row afresh, or from a heartbeat once the reading heartbeats are
// authenticated with has aged past HeartbeatAuthFresh.
func TestIdleAgentLearnsItsInstanceEnded(t *testing.T) {
	r := newRig(t)
	cp := r.cp
	g := r.run(r.launched("bp-1"))
	cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalWarm))
	cp.Calls.Await(t, 1, agentapitest.IsOp("next"))
	cp.Calls.Await(t, 1, agentapitest.IsOp("heartbeat")) // the first one, sent at once
	cp.Move("bp-1", func(i *domain.Instance) { i.State = domain.StateTerminating })
	if _, err := stepUntilDone(t, cp.Clock, g); !errors.Is(err, agent.ErrInstanceEnded) {
		t.Fatalf("Run: %v, want ErrInstanceEnded", err)
	}
}
