package agent_test

import (
	"errors"
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
