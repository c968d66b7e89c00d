package app

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/cloud/local"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/reaper"
	"github.com/bullpen-ci/bullpen/internal/simagent"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// Simulation is the embedded default's profile: a GitHub, a cloud and the
// agents of its machines simulated in this process. Each is nil when the
// options chose a real one.
type Simulation struct {
	GitHub *ghsim.GitHub   // with --github sim
	Cloud  *sim.Cloud      // with --cloud sim
	Agents *simagent.Fleet // the simulated machines' agents
}

// newGitHub builds the GitHub the options chose. The simulated one's
// deliveries go straight to the inbox, as a verified webhook would, until
// the app closes.
func (a *App) newGitHub(ctx context.Context) error {
	if a.opts.GitHub != "sim" {
		return a.newRealGitHub(ctx)
	}
	// The simulated agents' jobs go on finishing after the loops stopped,
	// and each sends a delivery: once the app closes, they have nowhere to
	// go. This closer runs before the store's, which was opened first.
	var closed atomic.Bool
	a.closers = append(a.closers, func() error { closed.Store(true); return nil })
	deliver := func(_, deliveryID string, payload []byte) { a.deliverSimulated(&closed, deliveryID, payload) }
	a.Sim.GitHub = ghsim.New(a.opts.Clock, ghsim.Options{Deliver: deliver, Enterprise: a.opts.Enterprise})
	a.GitHub = a.Sim.GitHub
	return nil
}

// deliverSimulated puts a delivery of the simulated GitHub in the inbox; it
// drops one that comes once the app is closed, as a stopped server would.
func (a *App) deliverSimulated(closed *atomic.Bool, deliveryID string, payload []byte) {
	if closed.Load() {
		a.opts.Log.Debug("simulated delivery dropped: the app is closed", "delivery", deliveryID)
		return
	}
	err := webhook.Enqueue(context.Background(), a.Queue, a.opts.Clock.Now(), deliveryID, payload)
	switch {
	case err == nil:
	case closed.Load(): // closed while it was on its way
		a.opts.Log.Debug("simulated delivery dropped: the app is closed", "delivery", deliveryID, "err", err)
	default:
		a.opts.Log.Warn("simulated delivery refused", "delivery", deliveryID, "err", err)
	}
}

// newCloud builds the compute provider the options chose, and the agents of
// simulated machines. It returns the verifier of the machines' identity
// proofs, when the provider has one.
func (a *App) newCloud(ctx context.Context) (domain.IdentityVerifier, error) {
	o := a.opts
	switch o.Cloud {
	case "aws":
		return a.newEC2(ctx)
	case "sim":
		if a.Sim.GitHub == nil {
			return nil, fmt.Errorf("app: the simulated cloud's agents run their jobs on the simulated GitHub (--github sim)")
		}
		agentOpts := o.Agent
		if agentOpts.Log == nil {
			agentOpts.Log = o.Log.With("loop", "simagent")
		}
		if agentOpts.FamilyWarmUp == nil && len(o.FamilyLatency) > 0 {
			agentOpts.FamilyWarmUp = map[string]time.Duration{}
			for family, l := range o.FamilyLatency {
				agentOpts.FamilyWarmUp[family] = l.WarmUp
			}
		}
		a.Sim.Agents = simagent.New(o.Clock, a.Agents, a.Sim.GitHub, agentOpts)
		a.Notices.Subscribe(a.Sim.Agents)
		a.Sim.Cloud = sim.New(o.Clock, sim.Options{Latency: o.Latency, FamilyLatency: o.FamilyLatency, Lifecycle: a.Sim.Agents, Capacity: o.SimCapacity, Seed: o.SimSeed})
		a.Cloud = a.Sim.Cloud
		a.closers = append(a.closers, func() error { a.Sim.Cloud.Close(); return nil })
		return nil, nil
	case "local":
		env := map[string]string{
			// "Shutting the machine down" is the agent exiting: never the host.
			"BULLPEN_AGENT_SHUTDOWN_COMMAND": "true",
		}
		maps.Copy(env, o.LocalAgentEnv)
		// Checked here, or every machine's agent would refuse them, seen
		// only in its own log, while the pools launched more.
		if err := agent.CheckSettings(env, agent.SettingsLimits{SilentAfter: cmp.Or(o.Reaper.SilentAfter, reaper.DefaultSilentAfter)}); err != nil {
			return nil, fmt.Errorf("local cloud: --local-agent-env: %w", err)
		}
		l, err := local.New(local.Options{Dir: o.LocalDir, KeepOnClose: o.LocalKeep, Clock: o.Clock,
			Log: o.Log.With("loop", "local-cloud"), AgentEnv: env})
		if err != nil {
			return nil, fmt.Errorf("local cloud: %w", err)
		}
		a.Cloud = l
		a.closers = append(a.closers, func() error {
			if err := l.Close(); err != nil {
				a.opts.Log.Warn("stop local machines", "err", err)
			}
			return nil
		})
		return nil, nil
	}
	return nil, errNoProvider("cloud", o.Cloud)
}
