// Package agentapitest runs the control plane's side of the agent API for
// tests: the real agentapi.Server over the real agents.Service and SQLite
// store and queue, driven by a virtual clock, with every AgentAPI call
// recorded so a test can wait for what an agent did.
package agentapitest

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testlog"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

// T0 is when every control plane's clock starts.
var T0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

// ControlPlane is an agent API with everything behind it, in a test world.
type ControlPlane struct {
	*testworld.World
	Service *agents.Service
	Server  *agentapi.Server
	Calls   *Recorder
	// Logs holds everything the server and the service logged, at every
	// level, so a test can check that no credential was.
	Logs *testlog.Buffer

	mu     sync.Mutex
	policy agents.Policy
}

// New returns a control plane whose instances are terminated after one job
// until SetPolicy says otherwise.
func New(t testing.TB) *ControlPlane {
	t.Helper()
	c := &ControlPlane{World: testworld.New(t, T0), Logs: &testlog.Buffer{}}
	log := slog.New(slog.NewTextHandler(c.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	notices := &agents.Notices{}
	var err error
	c.Service, err = agents.New(c.Store, c.Queue, c.Clock, log, nil, agents.Options{Policy: c.currentPolicy, Notices: notices})
	if err != nil {
		t.Fatal(err)
	}
	c.Calls = &Recorder{api: c.Service, changed: make(chan struct{})}
	c.Server = agentapi.New(c.Store, c.Calls, c.Clock, log, nil)
	notices.Subscribe(c.Server)
	return c
}

// SetPolicy sets every instance's after-job policy.
func (c *ControlPlane) SetPolicy(p agents.Policy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.policy = p
}

func (c *ControlPlane) currentPolicy(domain.Instance) agents.Policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.policy
}

// Launch writes the row of a machine launched with bootstrap secret
// secret: cloud id "i-"+id, launch "lt-"+id, in state st.
func (c *ControlPlane) Launch(id string, st domain.State, secret string) domain.Instance {
	c.T.Helper()
	return c.CreateInstance(domain.Instance{ID: id, State: st, LaunchID: "lt-" + id, BootstrapHash: domain.HashSecret(secret)})
}

// CreateInstance writes a row as the world's CreateInstance does, on a
// machine of 2 vCPUs and 4 GiB unless in says otherwise.
func (c *ControlPlane) CreateInstance(in domain.Instance) domain.Instance {
	c.T.Helper()
	if in.CPU == 0 {
		in.CPU, in.MemoryMiB = 2, 4096
	}
	return c.World.CreateInstance(in)
}

// Get reads a row.
func (c *ControlPlane) Get(id string) domain.Instance {
	c.T.Helper()
	return c.Instance(id)
}

// Move rewrites a row the way another part of the control plane would.
func (c *ControlPlane) Move(id string, fn func(*domain.Instance)) domain.Instance {
	c.T.Helper()
	in, err := c.Store.Transition(c.Ctx, id, domain.GuardOf(c.Get(id)), fn)
	if err != nil {
		c.T.Fatal(err)
	}
	return in
}

// Assign does what the dispatcher does for a ready instance: claims it for
// a new job with a runner registered for it (config jit), and tells the
// agent.
func (c *ControlPlane) Assign(id string, jobID int64, jit string) domain.Instance {
	c.T.Helper()
	in := c.AssignElsewhere(id, jobID, jit)
	c.Server.Assigned(in.CloudID)
	return in
}

// AssignElsewhere assigns as Assign does, as another replica sharing the
// store would: no notice reaches this server.
func (c *ControlPlane) AssignElsewhere(id string, jobID int64, jit string) domain.Instance {
	c.T.Helper()
	runner := RunnerName(id, jobID)
	in := c.Move(id, func(i *domain.Instance) {
		i.State, i.Job, i.RunnerName, i.RunnerConfig = domain.StateClaimed, domain.JobKey(jobID), runner, jit
		i.Deadline = c.Clock.Now().Add(domain.DefaultDeadlines().Claimed)
	})
	_, err := c.Store.CreateJobs(c.Ctx, []domain.Job{{
		ID: jobID, Status: domain.JobAssigned, Route: domain.RouteLaunch, InstanceID: id,
		RunnerName: runner, RunnerID: 7, Labels: []string{"self-hosted"},
	}})
	if err != nil {
		c.T.Fatal(err)
	}
	return in
}

// RunnerName is the name of the runner Assign registers.
func RunnerName(id string, jobID int64) string { return id + "-" + domain.JobKey(jobID) }
