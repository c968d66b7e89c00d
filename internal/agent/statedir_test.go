package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/agentapi/agentapitest"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Two agents on one machine would both run the runner of the same job: the
// second finds the state directory taken and stops, saying so, and the
// directory is free again once the first stops.
func TestASecondAgentOnTheStateDirectoryStops(t *testing.T) {
	r := newRig(t)
	cfg := r.launched("bp-1")
	first := r.run(cfg)
	r.cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalWarm))

	err := result(t, r.run(cfg))
	if !errors.Is(err, agent.ErrStateDirInUse) || !strings.Contains(err.Error(), cfg.StateDir) {
		t.Fatalf("second agent: %v, want ErrStateDirInUse naming the directory", err)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	beats := r.cp.Calls.Count(agentapitest.IsOp("heartbeat"))
	r.run(cfg)
	r.cp.Calls.Await(t, beats+1, agentapitest.IsOp("heartbeat"))
}

// A job mark that cannot be written (a full disk, a read-only directory)
// is reported as the job's failure, so the job goes back to its queue,
// and its runner does not start.
func TestAJobMarkThatCannotBeWrittenFailsTheJob(t *testing.T) {
	r := newRig(t)
	cfg := r.launched("bp-1")
	r.run(cfg)
	r.cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalWarm))
	// A directory where the mark goes cannot be replaced by a file, even
	// by root.
	if err := os.Mkdir(filepath.Join(cfg.StateDir, "job"), 0o700); err != nil {
		t.Fatal(err)
	}
	r.cp.Assign("bp-1", 101, "jit")
	c := r.cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalFailed))
	if c.Signal.Job != "101" || !strings.HasPrefix(c.Signal.Reason, "job mark: ") || c.Err != nil {
		t.Fatalf("failed signal %+v, want job 101's with the job mark's error", c)
	}
	if got := r.lines("jit.log"); got != nil {
		t.Fatalf("the runner ran: %q", got)
	}
}

// An agent restarted after its hello was answered but before it saved the
// token (the answer lost on the way, the agent stopped while it waited to
// try again) proposes the same token and is given it, where a new one
// would be refused as already issued and leave the machine without one.
func TestARestartedHelloProposesTheSameToken(t *testing.T) {
	r := newRig(t)
	cfg := r.launched("bp-1")
	clk, first := r.startAgainst(cfg, r.lossyHelloFront(t))
	clk.BlockUntil(1) // the hello's backoff
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	if r.cp.Get("bp-1").AgentTokenHash == "" {
		t.Fatal("the first hello issued no token")
	}

	second := r.start(cfg, clk, r.srv.Client())
	r.cp.Calls.Await(t, 1, agentapitest.IsSignal(domain.SignalWarm))
	select {
	case <-second.done:
		t.Fatalf("the restarted agent stopped: %v", second.err)
	default:
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "identity.json")); err != nil {
		t.Fatalf("no identity saved: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "proposed-token.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the proposed token is kept after the identity was saved: %v", err)
	}
}
