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
