package app

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/api"
	"github.com/bullpen-ci/bullpen/internal/autoscale"
	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/dispatch"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/httpauth"
	"github.com/bullpen-ci/bullpen/internal/intake"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/provision"
	"github.com/bullpen-ci/bullpen/internal/queue/keepalive"
	"github.com/bullpen-ci/bullpen/internal/reaper"
	"github.com/bullpen-ci/bullpen/internal/spotbreaker"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// wire builds every part, each given its collaborators when it is built.
func (a *App) wire(ctx context.Context) error {
	o := a.opts
	log, reg, clk := o.Log, o.Registry, o.Clock
	var err error
	if a.Loops, err = loop.NewRunner(clk, log, reg); err != nil {
		return err
	}
	if a.Exclusive, err = loop.NewExclusive(a.Store, o.ReplicaID, clk, log.With("loop", "leases"), reg); err != nil {
		return err
	}
	a.specHashes = newSpecHashes(a.Store, clk, log.With("loop", "dispatch"))
	spot := o.SpotBreaker
	spot.Store = a.Store // every replica counts the interruptions any of them hears of
	if a.SpotBreaker, err = spotbreaker.New(spot, clk, log.With("loop", "spot"), reg); err != nil {
		return err
	}
	a.Agents, err = agents.New(a.Store, a.Queue, clk, log.With("loop", "agents"), reg, agents.Options{
		Policy: a.policy, HeartbeatFlush: o.HeartbeatFlush, HeartbeatResolution: o.beatResolution, Deadlines: o.Deadlines, Notices: a.Notices,
		Interrupted: a.SpotBreaker.Record, SpecHash: a.specHashes.hash})
	if err != nil {
		return err
	}
	if a.Webhook, err = webhook.New(o.WebhookSecret, a.Queue, clk, log.With("loop", "webhook"), reg,
		webhook.Options{OnPush: a.configPushed}); err != nil {
		return err
	}
	if err := a.newGitHub(ctx); err != nil {
		return err
	}
	if err := a.newConfigSource(ctx); err != nil {
		return err
	}
	identity, err := a.newCloud(ctx)
	if err != nil {
		return err
	}
	apiOpts := []agentapi.Option{agentapi.WithRecheck(o.AgentRecheck)}
	if identity != nil {
		apiOpts = append(apiOpts, agentapi.WithIdentity(identity))
	}
	a.AgentAPI = agentapi.New(a.Store, a.Agents, clk, log.With("loop", "agentapi"), reg, apiOpts...)
	a.Notices.Subscribe(a.AgentAPI)
	if err := a.wireConverger(); err != nil {
		return err
	}
	if err := a.wireJobPath(); err != nil {
		return err
	}
	// One throttle per address across the status API and the dashboard.
	if a.authLimiter, err = httpauth.NewLimiter(httpauth.LimiterOptions{Clock: clk, Log: log.With("loop", "auth"), Registry: reg}); err != nil {
		return err
	}
	if err := a.wireReaper(); err != nil {
		return err
	}
	return a.wireDashboard()
}

func (a *App) wireConverger() error {
	o := a.opts
	conv := o.Converger
	conv.ControllerID, conv.AgentURL, conv.SpotAllowed, conv.IDs = o.ControllerID, o.AgentURL, a.SpotBreaker.SpotAllowed, o.IDs
	if conv.LeaseTTL == 0 {
		conv.LeaseTTL = -1 // Run holds the converger's lease around its loop (App.Exclusive)
	}
	scaled, err := autoscale.NewPoolMetrics(o.Registry)
	if err != nil {
		return err
	}
	a.Scaler = &autoscale.PoolScaler{Demand: a.demand, Recorded: a.poolStatus, Log: o.Log.With("loop", "autoscale"), Metrics: scaled}
	conv.Targeter = func(ctx context.Context, p domain.Pool, at time.Time) (string, domain.Target) {
		entry, t := converger.ScheduleTarget(ctx, p, at)
		return a.Scaler.Adjust(ctx, p, at, entry, t)
	}
	a.Converger, err = converger.New(a.Store, a.Cloud, o.Clock, a.scaledPoolSpecs, o.Log.With("loop", "converger"), o.Registry, conv)
	if err != nil {
		return err
	}
	every := a.Converger.Interval()
	if err := a.Config().CheckCadence(a.pools(), every); err != nil {
		return fmt.Errorf("the configuration's autoscaling with a converger cycle of %v: %w", every, err)
	}
	// A replica that has not converged a pool for longer than the lease
	// and two cycles has lost it to another meanwhile: its state is old.
	// A restart's gap is allowed on top, so that a replica stopped in the
	// middle of a burst (a SIGTERM takes up to twice the shutdown grace)
	// and started again resumes the count it recorded.
	a.Scaler.StaleAfter = a.leaseTTL(every) + 2*every + restartAllowance
	return nil
}

// restartAllowance is how long a restart of serve may take, stop and start
// together, for its autoscalers to resume the counts they recorded: twice
// the default shutdown grace and a service manager's restart delay.
const restartAllowance = 3 * time.Minute

// wireJobPath builds the loops that serve jobs: intake, pool dispatch and
// provisioning.
func (a *App) wireJobPath() error {
	o := a.opts
	log, reg, clk := o.Log, o.Registry, o.Clock
	var err error
	a.Dispatcher, err = dispatch.New(dispatch.Deps{
		Store: a.Store, Queue: a.Queue, Cloud: a.Cloud, GitHub: a.GitHub, Clock: clk, Log: log.With("loop", "dispatch"),
		Scope: a.scope, SpecHash: a.specHashes.hash, Notify: a.Agents.Notify,
		Hold: func(queue string, receipts []string, visibility time.Duration) dispatch.Held {
			return keepalive.Hold(a.Queue, clk, queue, receipts, visibility, log.With("loop", "dispatch"))
		},
	}, reg, o.Dispatch)
	if err != nil {
		return err
	}
	prov := o.Provision
	prov.ControllerID, prov.AgentURL, prov.SpotAllowed, prov.IDs = o.ControllerID, o.AgentURL, a.SpotBreaker.SpotAllowed, o.IDs
	a.Provisioner, err = provision.New(provision.Deps{
		Store: a.Store, Queue: a.Queue, Cloud: a.Cloud, GitHub: a.GitHub, Clock: clk, Log: log.With("loop", "provision"),
		Scope: a.scope, Notify: a.Agents.Notify, Registrations: a.Agents.Registrations(), ReuseAllowed: a.reuseAllowed,
		Reused: a.reusedRunner, SpecHash: a.specHashes.hash, Respec: a.respec,
		Hold: func(queue string, receipts []string, visibility time.Duration) func() {
			return keepalive.Hold(a.Queue, clk, queue, receipts, visibility, log.With("loop", "provision")).Stop
		},
	}, reg, prov)
	if err != nil {
		return err
	}
	a.Intake, err = intake.New(intake.Deps{
		Store: a.Store, Queue: a.Queue, Clock: clk, Log: log.With("loop", "intake"),
		Routing: a.routing, Finisher: a.Agents, GitHub: a.GitHub,
		Hold: func(queue string, receipts []string, visibility time.Duration) func() {
			return keepalive.Hold(a.Queue, clk, queue, receipts, visibility, log.With("loop", "intake")).Stop
		},
	}, reg, o.Intake)
	return err
}

func (a *App) wireReaper() error {
	o := a.opts
	a.Terminator = &reaper.Terminator{Store: a.Store, Queue: a.Queue, Cloud: a.Cloud, Clock: o.Clock,
		Log: o.Log.With("loop", "terminator"), Interval: o.TerminateEvery, Deadlines: o.Deadlines}
	if err := a.Terminator.Init(o.Registry); err != nil {
		return err
	}
	rp := o.Reaper
	rp.TerminatingAllowance = o.Deadlines.Terminating
	rp.RunningAllowance = o.Deadlines.Running
	rp.CancelRejected = rp.CancelRejected || o.CancelRejected
	// A job rejected for a pool not yet in force waits out two reloads
	// before its run is cancelled: a longer --reload must not cancel runs
	// a reload was about to serve.
	rp.RejectedGrace = max(cmp.Or(rp.RejectedGrace, reaper.DefaultRejectedGrace), 2*o.ConfigInterval)
	a.Reconciler = &reaper.Reconciler{
		Store: a.Store, Queue: a.Queue, Cloud: a.Cloud, GitHub: a.GitHub, Clock: o.Clock, Log: o.Log.With("loop", "reaper"),
		ControllerID: o.ControllerID, Scopes: a.scopes, Ours: a.ours, Takes: a.takes, Options: rp,
	}
	if err := a.Reconciler.Init(o.Registry); err != nil {
		return err
	}
	a.Terminator.AgentGrace = a.Reconciler.SilentAfter // agents get as long to come back after a restart
	a.API = &api.Server{Store: a.Store, Token: o.AdminToken, ViewerToken: o.ViewerToken, Log: o.Log.With("loop", "api"), Pools: a.poolInfos, Limiter: a.authLimiter,
		SpotBreakers: a.SpotBreaker.Opened}
	return nil
}

// errNoProvider is a choice the options validated but New cannot honour.
func errNoProvider(kind, name string) error { return fmt.Errorf("app: no %s provider %q", kind, name) }
