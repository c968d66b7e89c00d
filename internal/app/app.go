// Package app wires bullpen's control plane together: store and queues,
// cloud and GitHub, the loops (converger, intake, pool dispatcher,
// provisioner, terminator), the agent service and the HTTP surface. `bullpen
// serve`, the demo, the benchmark and the end-to-end tests all build it here,
// so they run the same system.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/api"
	"github.com/bullpen-ci/bullpen/internal/autoscale"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/configsource"
	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/dashboard"
	"github.com/bullpen-ci/bullpen/internal/dispatch"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/httpauth"
	"github.com/bullpen-ci/bullpen/internal/intake"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/provision"
	"github.com/bullpen-ci/bullpen/internal/reaper"
	"github.com/bullpen-ci/bullpen/internal/simagent"
	"github.com/bullpen-ci/bullpen/internal/spotbreaker"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// Options configure the control plane. Zero values take the defaults.
type Options struct {
	Config *config.Config // the configuration to start with; read from ConfigPath when nil
	// ConfigPath, when set, is re-read every ConfigInterval: a file, or a
	// file in a GitHub repository (github://OWNER/REPO/PATH).
	ConfigPath string
	// ConfigInterval is how often ConfigPath is re-read; default 30 s.
	ConfigInterval time.Duration
	Environment    string // which pools this stack serves
	StorePath      string // SQLite file
	// ScratchStore: the file is thrown away afterwards (a simulation's),
	// so SQLite need not sync it.
	ScratchStore bool
	// Shared, when set, keeps the state in DynamoDB and SQS instead, for
	// several replicas.
	Shared        *Shared
	ControllerID  string // tags every machine; default "bullpen-" + Environment
	WebhookSecret string
	AdminToken    string
	// ViewerToken, when set, signs in to the dashboard read-only.
	ViewerToken string
	// RunnerScope is "repo" (runners register per repository, the default),
	// "org" or "enterprise" (runners of Enterprise, which serve every
	// organisation of it that their runner group admits).
	RunnerScope string
	// Enterprise is the enterprise's slug, with RunnerScope "enterprise".
	Enterprise     string
	CancelRejected bool

	Clock    domain.Clock
	Log      *slog.Logger
	Registry *prometheus.Registry

	// Cloud is "sim" (the default: simulated machines and agents, in this
	// process), "local" (every machine a `bullpen agent` process) or "aws"
	// (EC2).
	Cloud string
	// GitHub is "sim" (the default: a simulated GitHub in this process,
	// whose deliveries go straight to the inbox), "app" (a GitHub App) or
	// "token".
	GitHub    string
	GitHubAPI GitHubAPI
	// LocalDir holds the local machines' directories; default a temporary
	// directory.
	LocalDir string
	// LocalKeep makes Close leave the local machines of LocalDir running,
	// for the next control plane on it to adopt (local.Options.KeepOnClose).
	LocalKeep bool
	// AgentURL is where machines' agents reach this control plane.
	AgentURL string
	// LocalAgentEnv adds agent settings to local machines' launch data.
	LocalAgentEnv map[string]string
	// AWS configures --cloud aws.
	AWS AWS
	// SpotBreaker tunes the spot circuit breaker.
	SpotBreaker spotbreaker.Options

	// Simulation (the embedded default: --cloud sim, --github sim).
	Latency sim.Latency
	// FamilyLatency overrides Latency, and the agents' warm-up, for the
	// instance types of a family ("m7a").
	FamilyLatency map[string]sim.Latency
	Agent         simagent.Options
	SimCapacity   int
	// SimSeed seeds the simulated cloud's machine ids; zero draws one.
	SimSeed uint64
	// SimJobsPerMinute, with the simulated GitHub, has it queue about this
	// many jobs a minute for the pools served when Run starts (as the demo
	// does), so that jobs can be watched going through serve with no
	// GitHub; zero queues none.
	SimJobsPerMinute float64
	// IDs draws the ids of new instances and launches; domain.NewID when
	// nil (a simulation seeds its own, so that its runs repeat).
	IDs func(prefix string) string

	// Deadlines are the per-state allowances (domain.DefaultDeadlines when
	// zero).
	Deadlines domain.Deadlines
	// HeartbeatFlush is how often batched agent heartbeats are written;
	// default 1 s.
	HeartbeatFlush time.Duration
	// beatResolution: on the embedded store, an instance's heartbeat is
	// written at most this often (set from the silence allowance).
	beatResolution time.Duration

	Converger converger.Options
	Dispatch  dispatch.Options
	Provision provision.Options
	Intake    intake.Options
	// TerminateEvery is the terminator's interval; default 5 s.
	TerminateEvery time.Duration
	// ReplicaID names this replica in the leases of the loops that run on
	// one replica at a time; default the host name and a random suffix.
	ReplicaID string
	// AgentRecheck is how often this replica looks for the instances of
	// its waiting long polls that another replica assigned or released
	// (agentapi.RecheckLoop); default 2 s, negative never.
	AgentRecheck time.Duration
	// LeasePeriod is how long such a loop stays with a replica that
	// stopped renewing its lease (died): another takes it over within
	// this. Default 30 s; at least twice the loop's interval.
	LeasePeriod time.Duration
	// Reaper tunes the reconciler (orphans, gone rows, dead runners, missed
	// webhooks, retention).
	Reaper reaper.Options
	// OnCycle, if set, receives each converger report (the demo prints it).
	OnCycle func(converger.Report)
}

// App is a running control plane. It holds ports, not adapters: which
// adapter stands behind each is chosen from the options, in New.
type App struct {
	opts Options
	cfg  atomic.Pointer[config.Config]

	Store  domain.Store
	Queue  domain.Queue
	Cloud  domain.Cloud
	GitHub domain.GitHub
	// githubTransport is the token's rate-limited transport (--github
	// token): the configuration's reads from a repository go through it,
	// counted against the token's budget and paused with its calls.
	githubTransport http.RoundTripper
	authLimiter     *httpauth.Limiter // throttles token guesses, per address
	// Sim is the simulation profile: the simulated cloud, GitHub and
	// agents that the options chose, each nil when a real one is used.
	Sim Simulation

	Notices  *agents.Notices // wakes every agent transport
	Agents   *agents.Service
	AgentAPI *agentapi.Server // the HTTP API of real agents

	Converger   *converger.Converger
	Dispatcher  *dispatch.Dispatcher
	Provisioner *provision.Provisioner
	Intake      *intake.Intake
	Terminator  *reaper.Terminator
	Scaler      *autoscale.PoolScaler
	SpotBreaker *spotbreaker.Breaker
	Reconciler  *reaper.Reconciler
	Webhook     *webhook.Handler
	API         *api.Server
	Dashboard   *dashboard.Dashboard
	Loops       *loop.Runner
	// Exclusive runs the loops that must act on one replica at a time.
	Exclusive *loop.Exclusive

	closers        []func() error // released by Close, last first
	source         configsource.Source
	reloadMu       sync.Mutex  // one configuration read at a time
	configReads    configReads // what they found; under reloadMu once New returns
	configs        *dashboard.ConfigRecorder
	configReloads  *configReloads
	specHashes     *specHashes
	awsCallsOnce   sync.Once
	awsCallsVec    *prometheus.CounterVec
	awsCallSeconds *prometheus.HistogramVec
	awsCallsErr    error
	// reconcileCursor counts the installations' repositories handed to
	// reconciliation so far: the next share starts there.
	reconcileCursor atomic.Int64
	// recentCursor counts the recent jobs' repositories handed to the
	// reaper, which looks at a few each cycle, in turn.
	recentCursor atomic.Int64
	// draining: a shutdown has started (see Draining).
	draining atomic.Bool
}

// New builds the control plane; nothing runs until Run.
func New(ctx context.Context, o Options) (*App, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	a := &App{opts: o, Notices: &agents.Notices{}}
	a.cfg.Store(o.Config)
	if err := a.openStore(ctx); err != nil {
		return nil, err
	}
	if err := a.wire(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// openStore opens the store and its queues: the embedded SQLite file, or
// DynamoDB and SQS.
func (a *App) openStore(ctx context.Context) error {
	if a.opts.Shared != nil {
		return a.openShared(ctx, *a.opts.Shared)
	}
	open := sqlite.Open
	if a.opts.ScratchStore {
		open = sqlite.OpenScratch
	}
	st, err := open(ctx, a.opts.StorePath, a.opts.Clock)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	a.Store, a.Queue = st, st.Queue(sqlite.QueueOptions{})
	a.closers = append(a.closers, st.Close)
	return nil
}

// check validates the options, every problem at once, and fills in the
// defaults of those left unset.
func (o *Options) check() error {
	if problems := o.problems(); len(problems) > 0 {
		return errors.New("app: " + strings.Join(problems, "; "))
	}
	o.setDefaults()
	return nil
}

// problems is what is missing or wrong in the options. An empty cloud or
// GitHub is set to the simulated one here, since which GitHub may be used
// depends on the cloud.
func (o *Options) problems() []string {
	var problems []string
	if o.Config == nil && o.ConfigPath == "" {
		problems = append(problems, "no configuration")
	}
	if o.StorePath == "" && o.Shared == nil {
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
	case "aws":
		problems = append(problems, o.AWS.check()...)
	default:
		problems = append(problems, fmt.Sprintf("cloud %q: want sim, local or aws", o.Cloud))
	}
	switch o.GitHub {
	case "":
		o.GitHub = "sim"
	case "sim":
	case "app", "token":
		problems = append(problems, o.GitHubAPI.check(o.GitHub)...)
		if o.Cloud == "sim" {
			problems = append(problems, errSimCloudNeedsSimGitHub)
		}
	default:
		problems = append(problems, fmt.Sprintf("github %q: want sim, app or token", o.GitHub))
	}
	if o.SimJobsPerMinute < 0 || o.SimJobsPerMinute > 0 && o.GitHub != "sim" {
		problems = append(problems, fmt.Sprintf("simulated jobs (%g a minute) need the simulated GitHub, and a rate not below 0", o.SimJobsPerMinute))
	}
	return append(problems, o.checkRunnerScope()...)
}

// setDefaults fills in what valid options left unset, and hands
// the deadlines and the shared store's heartbeat resolution to the loops
// that need them.
func (o *Options) setDefaults() {
	if o.ControllerID == "" {
		o.ControllerID = "bullpen-" + o.Environment
	}
	if o.ConfigInterval <= 0 {
		o.ConfigInterval = 30 * time.Second
	}
	if o.Deadlines == (domain.Deadlines{}) {
		o.Deadlines = domain.DefaultDeadlines()
	}
	if o.ReplicaID == "" {
		o.ReplicaID = defaultReplicaID()
	}
	if o.AgentRecheck == 0 {
		o.AgentRecheck = 2 * time.Second
	}
	if o.LeasePeriod <= 0 {
		o.LeasePeriod = 30 * time.Second
	}
	if o.HeartbeatFlush <= 0 {
		o.HeartbeatFlush = time.Second
	}
	if o.Shared != nil {
		sh := *o.Shared
		if sh.HeartbeatResolution <= 0 {
			sh.HeartbeatResolution = DefaultHeartbeatResolution
		}
		o.Shared, o.Provision.HeartbeatLag = &sh, sh.HeartbeatResolution
	} else {
		// The embedded store writes a heartbeat at most this often per
		// instance (the shared store does so itself), well within the
		// silence allowance.
		o.beatResolution = min(DefaultHeartbeatResolution, cmp.Or(o.Reaper.SilentAfter, reaper.DefaultSilentAfter)/4)
		o.Provision.HeartbeatLag = o.beatResolution
	}
	o.Converger.Deadlines, o.Dispatch.Deadlines, o.Provision.Deadlines = o.Deadlines, o.Deadlines, o.Deadlines
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// Close releases what New opened, last first: the machines (a local cloud
// stops every agent process unless LocalKeep, a simulated one its agents),
// then the store.
// Call it after Run has returned.
func (a *App) Close() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		errs = append(errs, a.closers[i]())
	}
	a.closers = nil
	return errors.Join(errs...)
}

// Registry is where every loop's metrics are registered.
func (a *App) Registry() *prometheus.Registry { return a.opts.Registry }
