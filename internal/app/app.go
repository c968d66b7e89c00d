// Package app wires bullpen's control plane together: store and queues,
// cloud and GitHub, the loops (converger, intake, pool dispatcher,
// provisioner, terminator), the agent service and the HTTP surface. `bullpen
// serve`, the demo, the benchmark and the end-to-end tests all build it here,
// so they run the same system.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/api"
	"github.com/bullpen-ci/bullpen/internal/autoscale"
	"github.com/bullpen-ci/bullpen/internal/cloud/local"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/dispatch"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/intake"
	"github.com/bullpen-ci/bullpen/internal/provision"
	"github.com/bullpen-ci/bullpen/internal/reaper"
	"github.com/bullpen-ci/bullpen/internal/simagent"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// Options configure the control plane. Zero values take the defaults.
type Options struct {
	Config     *config.Config // the configuration to start with
	ConfigPath string         // when set, re-read every ConfigInterval
	// ConfigInterval is how often ConfigPath is re-read; default 30 s.
	ConfigInterval time.Duration
	Environment    string // which pools this stack serves
	StorePath      string // SQLite file
	ControllerID   string // tags every machine; default "bullpen-" + Environment
	WebhookSecret  string
	AdminToken     string
	// RunnerScope is "repo" (runners register per repository, the default)
	// or "org".
	RunnerScope    string
	CancelRejected bool

	Clock    domain.Clock
	Log      *slog.Logger
	Registry *prometheus.Registry

	// Cloud is "sim" (the default: simulated machines and agents, in this
	// process) or "local" (every machine a `bullpen agent` process).
	Cloud string
	// LocalDir holds the local machines' directories; default a temporary
	// directory.
	LocalDir string
	// AgentURL is where machines' agents reach this control plane.
	AgentURL string
	// LocalAgentEnv adds agent settings to local machines' launch data.
	LocalAgentEnv map[string]string

	// Simulation (the embedded default: --cloud sim, --github sim).
	Latency     sim.Latency
	Agent       simagent.Options
	SimCapacity int

	// Deadlines are the per-state allowances (domain.DefaultDeadlines when
	// zero).
	Deadlines domain.Deadlines
	// HeartbeatFlush is how often batched agent heartbeats are written;
	// default 1 s.
	HeartbeatFlush time.Duration

	Converger converger.Options
	Dispatch  dispatch.Options
	Provision provision.Options
	Intake    intake.Options
	// TerminateEvery is the terminator's interval; default 5 s.
	TerminateEvery time.Duration
	// Reaper tunes the reconciler (orphans, gone rows, dead runners, missed
	// webhooks, retention).
	Reaper reaper.Options
	// OnCycle, if set, receives each converger report (the demo prints it).
	OnCycle func(converger.Report)
}

// App is a running control plane.
type App struct {
	opts Options
	cfg  atomic.Pointer[config.Config]

	Store     *sqlite.Store
	Queue     *sqlite.Queue
	Cloud     domain.Cloud
	Sim       *sim.Cloud   // when Cloud is "sim"
	Local     *local.Cloud // when Cloud is "local"
	GitHub    *ghsim.GitHub
	Agents    *agents.Service
	SimAgents *simagent.Fleet  // the simulated machines' agents (sim only)
	AgentAPI  *agentapi.Server // the HTTP API of real agents

	Converger   *converger.Converger
	Dispatcher  *dispatch.Dispatcher
	Provisioner *provision.Provisioner
	Intake      *intake.Intake
	Terminator  *reaper.Terminator
	Scaler      *autoscale.PoolScaler
	Reconciler  *reaper.Reconciler
	Webhook     *webhook.Handler
	API         *api.Server

	specMu    sync.RWMutex
	specHashs map[string]string
}

// New builds the control plane; nothing runs until Run.
func New(ctx context.Context, o Options) (*App, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	a := &App{opts: o, specHashs: map[string]string{}}
	a.cfg.Store(o.Config)
	st, err := sqlite.Open(ctx, o.StorePath, o.Clock)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	a.Store, a.Queue = st, st.Queue(sqlite.QueueOptions{})
	if err := a.wire(); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

func (o *Options) check() error {
	var problems []string
	if o.Config == nil {
		problems = append(problems, "no configuration")
	}
	if o.StorePath == "" {
		problems = append(problems, "no store path")
	}
	if o.WebhookSecret == "" {
		problems = append(problems, "no webhook secret")
	}
	if o.AdminToken == "" {
		problems = append(problems, "no admin token")
	}
	switch o.Cloud {
	case "":
		o.Cloud = "sim"
	case "sim", "local":
	default:
		problems = append(problems, fmt.Sprintf("cloud %q: want sim or local", o.Cloud))
	}
	switch o.RunnerScope {
	case "":
		o.RunnerScope = "repo"
	case "repo", "org":
	default:
		problems = append(problems, fmt.Sprintf("runner scope %q: want repo or org", o.RunnerScope))
	}
	if len(problems) > 0 {
		return errors.New("app: " + strings.Join(problems, "; "))
	}
	if o.ControllerID == "" {
		o.ControllerID = "bullpen-" + o.Environment
	}
	if o.ConfigInterval <= 0 {
		o.ConfigInterval = 30 * time.Second
	}
	if o.Deadlines == (domain.Deadlines{}) {
		o.Deadlines = domain.DefaultDeadlines()
	}
	if o.HeartbeatFlush <= 0 {
		o.HeartbeatFlush = time.Second
	}
	o.Converger.Deadlines, o.Dispatch.Deadlines, o.Provision.Deadlines = o.Deadlines, o.Deadlines, o.Deadlines
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return nil
}

func (a *App) wire() error {
	o := a.opts
	log, reg, clk := o.Log, o.Registry, o.Clock
	var err error
	a.Agents, err = agents.New(a.Store, a.Queue, clk, log.With("loop", "agents"), reg, agents.Options{Policy: a.policy, HeartbeatFlush: o.HeartbeatFlush, Deadlines: o.Deadlines})
	if err != nil {
		return err
	}
	a.Webhook, err = webhook.New(o.WebhookSecret, a.Queue, clk, log.With("loop", "webhook"), reg)
	if err != nil {
		return err
	}
	a.GitHub = ghsim.New(clk, ghsim.Options{Deliver: a.deliverSimulated})
	a.AgentAPI = agentapi.New(a.Store, a.Agents, clk, log.With("loop", "agentapi"), reg)
	if err := a.newCloud(); err != nil {
		return err
	}

	conv := o.Converger
	conv.ControllerID, conv.AgentURL = o.ControllerID, o.AgentURL
	a.Scaler = &autoscale.PoolScaler{Demand: a.demand, Log: log.With("loop", "autoscale")}
	conv.Targeter = func(p domain.Pool, at time.Time) (string, domain.Target) {
		entry, t := converger.ScheduleTarget(p, at)
		return a.Scaler.Adjust(context.Background(), p, at, entry, t)
	}
	if a.Converger, err = converger.New(a.Store, a.Cloud, clk, a.poolSpecs, log.With("loop", "converger"), reg, conv); err != nil {
		return err
	}
	if err := a.wireJobPath(); err != nil {
		return err
	}
	a.Terminator = &reaper.Terminator{Store: a.Store, Queue: a.Queue, Cloud: a.Cloud, Clock: clk, Log: log.With("loop", "terminator"),
		Interval: o.TerminateEvery, Deadlines: o.Deadlines}
	o.Reaper.TerminatingAllowance = o.Deadlines.Terminating
	a.Reconciler = &reaper.Reconciler{
		Store: a.Store, Queue: a.Queue, Cloud: a.Cloud, GitHub: a.GitHub, Clock: clk, Log: log.With("loop", "reaper"),
		ControllerID: o.ControllerID, Scopes: a.scopes, Options: o.Reaper,
	}
	if err := a.Reconciler.Init(reg); err != nil {
		return err
	}
	a.API = &api.Server{Store: a.Store, Token: o.AdminToken, Log: log.With("loop", "api"), Pools: a.poolInfos}
	return nil
}

// wireJobPath builds the loops that serve jobs: intake, pool dispatch and
// provisioning.
func (a *App) wireJobPath() error {
	o := a.opts
	log, reg, clk := o.Log, o.Registry, o.Clock
	var err error
	a.Dispatcher, err = dispatch.New(dispatch.Deps{
		Store: a.Store, Queue: a.Queue, Cloud: a.Cloud, GitHub: a.GitHub, Clock: clk, Log: log.With("loop", "dispatch"),
		Scope: a.scope, SpecHash: a.specHash, Notify: a.Agents.Notify,
	}, reg, o.Dispatch)
	if err != nil {
		return err
	}
	prov := o.Provision
	prov.ControllerID, prov.AgentURL = o.ControllerID, o.AgentURL
	a.Provisioner, err = provision.New(provision.Deps{
		Store: a.Store, Queue: a.Queue, Cloud: a.Cloud, GitHub: a.GitHub, Clock: clk, Log: log.With("loop", "provision"),
		Scope: a.scope, Notify: a.Agents.Notify, Registrations: a.Agents.Registrations(), ReuseAllowed: a.reuseAllowed,
	}, reg, prov)
	if err != nil {
		return err
	}
	a.Intake, err = intake.New(intake.Deps{
		Store: a.Store, Queue: a.Queue, Clock: clk, Log: log.With("loop", "intake"),
		Routing: a.routing, Finisher: a.Agents, GitHub: a.GitHub,
	}, reg, withCancel(o.Intake, o.CancelRejected))
	if err != nil {
		return err
	}
	return nil
}

// newCloud builds the compute provider and wires its agents: simulated ones
// in this process, or real ones over the agent API.
func (a *App) newCloud() error {
	o := a.opts
	notify := notifiers{a.AgentAPI}
	switch o.Cloud {
	case "sim":
		a.SimAgents = simagent.New(o.Clock, a.Agents, a.GitHub, withLog(o.Agent, o.Log))
		a.Sim = sim.New(o.Clock, sim.Options{Latency: o.Latency, Lifecycle: a.SimAgents, Capacity: o.SimCapacity})
		a.Cloud = a.Sim
		notify = append(notify, a.SimAgents)
	case "local":
		env := map[string]string{
			// "Shutting the machine down" is the agent exiting: never the host.
			"BULLPEN_AGENT_SHUTDOWN_COMMAND": "true",
		}
		for k, v := range o.LocalAgentEnv {
			env[k] = v
		}
		l, err := local.New(local.Options{Dir: o.LocalDir, Clock: o.Clock, Log: o.Log.With("loop", "local-cloud"), AgentEnv: env})
		if err != nil {
			return fmt.Errorf("local cloud: %w", err)
		}
		a.Local, a.Cloud = l, l
	}
	a.Agents.SetNotifier(notify)
	return nil
}

// notifiers tells every agent transport that an instance has news.
type notifiers []domain.AssignmentNotifier

func (ns notifiers) Assigned(cloudID string) {
	for _, n := range ns {
		n.Assigned(cloudID)
	}
}

func withLog(o simagent.Options, log *slog.Logger) simagent.Options {
	if o.Log == nil {
		o.Log = log.With("loop", "simagent")
	}
	return o
}

func withCancel(o intake.Options, cancel bool) intake.Options {
	o.CancelRejected = o.CancelRejected || cancel
	return o
}

// Config returns the configuration in force.
func (a *App) Config() *config.Config { return a.cfg.Load() }

// SetConfig replaces the configuration; loops see it on their next cycle.
func (a *App) SetConfig(c *config.Config) { a.cfg.Store(c) }

func (a *App) pools() []domain.Pool { return a.Config().PoolsFor(a.opts.Environment) }

func (a *App) poolSpecs() []converger.PoolSpec {
	cfg := a.Config()
	var out []converger.PoolSpec
	for _, p := range cfg.PoolsFor(a.opts.Environment) {
		r, ok := cfg.Runner(p.Runner)
		if !ok {
			continue // config validation makes this impossible
		}
		out = append(out, converger.PoolSpec{Pool: p, Runner: r})
	}
	return out
}

func (a *App) poolInfos() []api.PoolInfo {
	var out []api.PoolInfo
	for _, p := range a.pools() {
		out = append(out, api.PoolInfo{Name: p.Name, Environment: p.Environment, Runner: p.Runner, Timezone: p.Timezone})
	}
	return out
}

func (a *App) routing() intake.Routing {
	cfg := a.Config()
	r := intake.Routing{Environment: a.opts.Environment, Pools: map[string]domain.Pool{}, Runners: cfg.Runners}
	for _, p := range cfg.PoolsFor(a.opts.Environment) {
		r.Pools[p.Name] = p
	}
	if d, ok := cfg.Runner("default"); ok {
		r.Default = d
	}
	return r
}

// reuseAllowed: a job of a pool that does not reuse instances gets a fresh
// machine; other jobs may take an idle reused one.
func (a *App) reuseAllowed(j domain.Job) bool {
	p, ok := a.Config().Pool(j.Pool)
	return !ok || p.Reuse
}

// policy is an instance's after-job policy: its pool's settings.
func (a *App) policy(in domain.Instance) agents.Policy {
	p, ok := a.Config().Pool(in.Pool)
	if !ok {
		return agents.Policy{}
	}
	return agents.Policy{Reuse: p.Reuse, MaxJobs: p.MaxJobsPerInstance, MaxAge: p.MaxAge, IdleLifetime: p.HotIdleLifetime}
}

func (a *App) scope(j domain.Job) domain.Scope {
	owner, repo, _ := strings.Cut(j.Repo, "/")
	if a.opts.RunnerScope == "org" {
		return domain.Scope{Owner: owner}
	}
	return domain.Scope{Owner: owner, Repo: repo}
}

// demand is what a pool's autoscaler follows: the jobs routed to the pool
// that are queued or in progress.
func (a *App) demand(ctx context.Context, pool string) (int, error) {
	list, err := a.Store.ListJobs(ctx, domain.JobFilter{Pool: pool,
		Statuses: []domain.JobStatus{domain.JobQueued, domain.JobAssigned, domain.JobRunning}})
	return len(list), err
}

// scopes are where the reaper looks for queued jobs and dead runners: the
// repositories (or organisations) of the jobs seen lately.
func (a *App) scopes(ctx context.Context) []domain.Scope {
	recent, err := a.Store.ListJobs(ctx, domain.JobFilter{Limit: 1000, Newest: true})
	if err != nil {
		a.opts.Log.Warn("list recent jobs for reconciliation", "err", err)
		return nil
	}
	seen := map[domain.Scope]bool{}
	var out []domain.Scope
	for _, j := range recent {
		s := a.scope(j)
		if s.Owner != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func (a *App) specHash(pool string) string {
	a.specMu.RLock()
	defer a.specMu.RUnlock()
	return a.specHashs[pool]
}

func (a *App) noteSpecHashes(r converger.Report) {
	a.specMu.Lock()
	defer a.specMu.Unlock()
	for _, p := range r.Pools {
		if p.SpecHash != "" {
			a.specHashs[p.Pool] = p.SpecHash
		}
	}
}

// Close releases the machines (a local cloud stops every agent process)
// and the store. Call it after Run has returned.
func (a *App) Close() error {
	if a.Sim != nil {
		a.Sim.Close()
	}
	if a.Local != nil {
		if err := a.Local.Close(); err != nil {
			a.opts.Log.Warn("stop local machines", "err", err)
		}
	}
	if a.Store != nil {
		return a.Store.Close()
	}
	return nil
}

// Registry is where every loop's metrics are registered.
func (a *App) Registry() *prometheus.Registry { return a.opts.Registry }
