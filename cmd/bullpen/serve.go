package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/autoscale"
	"github.com/bullpen-ci/bullpen/internal/configsource"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/queue/sqs"
	"github.com/bullpen-ci/bullpen/internal/spotbreaker"
	"github.com/bullpen-ci/bullpen/internal/store/dynamodb"
)

func init() {
	register("serve", "run the control plane: webhooks, pools, dispatch, provisioning", cmdServe)
}

// serveFlags are serve's settings; every flag has an environment variable.
type serveFlags struct {
	config, listen, store, queue, cloud, github string
	adminListen                                 string
	localDir, agentURL                          string
	localEnv                                    map[string]string
	secret, secretFile, token, tokenFile        string
	viewer, viewerFile                          string
	environment, controllerID, scope            string
	replicaID                                   string
	logLevel, logFormat, simLatency             string
	convergeEvery, terminateEvery, reload       time.Duration
	reapEvery, orphanGrace, goneGrace           time.Duration
	silentAfter, jobRetention                   time.Duration
	instanceRetention, danglingAfter            time.Duration
	claimHeartbeat, claimRegistration           time.Duration
	creationTimeout, rpRequeueDelay             time.Duration
	heartbeatFlush, shutdownGrace               time.Duration
	redelivery, leasePeriod, recheck            time.Duration
	spotBreaker                                 spotbreaker.Options
	http                                        httpSettings
	deadlines                                   domain.Deadlines
	aws                                         awsFlags
	gh                                          githubFlags
	cancelRejected                              bool
	simJobsPerMinute                            float64
	getenv                                      func(string) string
	// envProblems are the variables whose values their flags refuse, by
	// flag: they are named with the flags' problems, never silently
	// dropped, unless the command line sets the flag.
	envProblems map[string]error
	// variables names, by flag, the variable that sets the flag when the
	// command line does not.
	variables map[string]string
}

// setBy records that $env sets the flag name.
func (f *serveFlags) setBy(name, env string) {
	if f.variables == nil {
		f.variables = map[string]string{}
	}
	f.variables[name] = env
}

// parseBool and parseInt are strconv's, saying what they want.
func parseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errors.New("want true or false")
	}
	return b, nil
}

func parseFloat(v string) (float64, error) {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, errors.New("want a number")
	}
	return x, nil
}

func parseInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, errors.New("want a whole number")
	}
	return n, nil
}

// envDefault is the default of the flag name, of type T, that env may set:
// its value parsed, or def when it is unset. A value that does not parse is
// recorded as a problem of the flag (and def kept until it is reported).
func envDefault[T any](f *serveFlags, name, env string, def T, parse func(string) (T, error)) T {
	f.setBy(name, env)
	v := f.getenv(env)
	if v == "" {
		return def
	}
	got, err := parse(v)
	if err != nil {
		if f.envProblems == nil {
			f.envProblems = map[string]error{}
		}
		f.envProblems[name] = fmt.Errorf("$%s=%s: %v", env, domain.QuoteShort(v), err)
		return def
	}
	return got
}

// envErrors are the problems of the variables whose flags the command line
// left unset: a flag given wins over its variable, a bad one included.
func (f *serveFlags) envErrors(fs *flag.FlagSet) []error {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var out []error
	for _, name := range slices.Sorted(maps.Keys(f.envProblems)) {
		if !set[name] {
			out = append(out, f.envProblems[name])
		}
	}
	return out
}

// fromEnvironment says which flags that a problem names took their value
// from the environment rather than the command line, since the problem
// names the flag: "--cloud came from $BULLPEN_CLOUD".
func (f *serveFlags) fromEnvironment(fs *flag.FlagSet, problems string) []string {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var out []string
	fs.VisitAll(func(fl *flag.Flag) {
		v := f.variables[fl.Name]
		if v == "" || set[fl.Name] || f.getenv(v) == "" || !strings.Contains(problems, "--"+fl.Name+" ") {
			return
		}
		out = append(out, fmt.Sprintf("--%s came from $%s", fl.Name, v))
	})
	return out
}

// warnSimulatedLeftovers warns when the store holds live instances while
// the cloud is the simulated one, which starts empty every run: they are
// an earlier run's, their machines do not exist, and the reaper closes
// them as gone (the demo refuses such a store outright).
func warnSimulatedLeftovers(ctx context.Context, st interface {
	ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error)
}, log *slog.Logger) {
	live, err := st.ListInstances(ctx, domain.InstanceFilter{States: []domain.State{domain.StatePending, domain.StateBooting,
		domain.StateReady, domain.StateStopping, domain.StateStopped, domain.StateClaimed, domain.StateRunning,
		domain.StateReleasing, domain.StateTerminating, domain.StateError}})
	if err != nil || len(live) == 0 {
		return
	}
	log.Warn("the store holds instances of an earlier run, and the simulated cloud starts empty: they are closed as gone; "+
		"point --store at a new file for a clean start", "instances", len(live))
}

// givenFlags are the flags given on the command line or by their
// environment variable.
func (f *serveFlags) givenFlags(fs *flag.FlagSet) map[string]bool {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for name, v := range f.variables {
		if f.getenv(v) != "" {
			given[name] = true
		}
	}
	return given
}

// providerFlags are the settings of one cloud or GitHub provider only
// (--aws-region and --aws-endpoint also serve DynamoDB and SQS, so they
// are not among them).
var providerFlags = []struct {
	applies func(f *serveFlags) bool
	flags   []string
}{
	{func(f *serveFlags) bool { return f.cloud == "aws" }, []string{"aws-agent-env", "aws-agent-sha256", "aws-agent-url",
		"aws-identity-certificate", "aws-image-owners", "aws-instance-profile", "aws-no-spot-fallback",
		"aws-security-groups", "aws-subnets", "aws-template-prefix"}},
	{func(f *serveFlags) bool { return f.cloud == "local" }, []string{"local-agent-env", "local-dir"}},
	{func(f *serveFlags) bool { return f.github == "app" }, []string{"github-app-id", "github-app-key-file"}},
	{func(f *serveFlags) bool { return f.github == "token" }, []string{"github-token-file"}},
	{func(f *serveFlags) bool { return f.github == "sim" }, []string{"sim-jobs-per-minute"}},
}

// unusedProviderFlags are the given flags of providers not in use: an
// --aws-subnets with the simulated cloud is more likely a forgotten
// --cloud aws than a setting meant to do nothing.
func unusedProviderFlags(f *serveFlags, given map[string]bool) []string {
	var out []string
	for _, p := range providerFlags {
		if p.applies(f) {
			continue
		}
		for _, name := range p.flags {
			if given[name] {
				out = append(out, "--"+name)
			}
		}
	}
	return out
}

// envString defines a string flag whose default $env sets when it is not
// empty.
func (f *serveFlags) envString(fs *flag.FlagSet, p *string, name, env, def, usage string) {
	f.setBy(name, env)
	if v := f.getenv(env); v != "" {
		def = v
	}
	fs.StringVar(p, name, def, usage+" ($"+env+")")
}

// defineSecretFile defines the file flag of the secret s, which $ENV_FILE sets.
func (f *serveFlags) defineSecretFile(fs *flag.FlagSet, s secretSetting, p *string, usage string) {
	f.setBy(s.flag+"-file", s.env+"_FILE")
	s.defineFile(fs, p, usage)
}

func (f *serveFlags) define(fs *flag.FlagSet, getenv func(string) string) {
	f.getenv = getenv
	str := func(p *string, name, env, def, usage string) { f.envString(fs, p, name, env, def, usage) }
	str(&f.config, "config", "BULLPEN_CONFIG", "", "pool configuration (runs-on.yml format), re-read every --reload: a file, or github://OWNER/REPO/PATH in a repository")
	str(&f.listen, "listen", "BULLPEN_LISTEN", "127.0.0.1:8080", "HTTP address for /webhook and the agents' /agent/v1/, and, without --admin-listen, the dashboard, /api/v1, /metrics and /healthz")
	str(&f.adminListen, "admin-listen", "BULLPEN_ADMIN_LISTEN", "", "HTTP address for the dashboard, /api/v1, /metrics and /healthz, which --listen then no longer serves: it keeps /webhook, /agent/v1/ and a /healthz that says only ok or unavailable (default: none, everything on --listen)")
	str(&f.store, "store", "BULLPEN_STORE", "sqlite://bullpen.db", "state store: sqlite://PATH, or dynamodb://TABLE shared by several replicas (with --queue sqs://PREFIX)")
	str(&f.queue, "queue", "BULLPEN_QUEUE", "", "message queues: in the store's SQLite file (the default), or sqs://PREFIX with --store dynamodb://TABLE")
	str(&f.cloud, "cloud", "BULLPEN_CLOUD", "sim", "compute provider: sim (simulated, in this process), local (each machine a bullpen agent process here) or aws (EC2)")
	str(&f.localDir, "local-dir", "BULLPEN_LOCAL_DIR", "", "with --cloud local: where machines keep their files; their processes outlive serve, for the next serve on it to adopt (default: a temporary directory, removed with its machines when serve exits)")
	str(&f.agentURL, "agent-url", "BULLPEN_AGENT_URL", "", "where machines' agents reach this control plane (default: http:// and the listen address)")
	str(&f.github, "github", "BULLPEN_GITHUB", "sim", "GitHub: sim (simulated, in this process), app (a GitHub App) or token (a token from --github-token-file or $BULLPEN_GITHUB_TOKEN)")
	// Secrets and their files' paths are read from the environment after
	// parsing, never as flag defaults (see secretSetting).
	fs.StringVar(&f.secret, "webhook-secret", "", "GitHub webhook secret (prefer $BULLPEN_WEBHOOK_SECRET or --webhook-secret-file)")
	f.defineSecretFile(fs, webhookSecret, &f.secretFile, "file holding the webhook secret")
	fs.StringVar(&f.token, "admin-token", "", "bearer token for /api/v1 (prefer $BULLPEN_ADMIN_TOKEN or --admin-token-file)")
	f.defineSecretFile(fs, adminToken, &f.tokenFile, "file holding the admin token")
	fs.StringVar(&f.viewer, "viewer-token", "", "optional read-only token for the dashboard (prefer $BULLPEN_VIEWER_TOKEN or --viewer-token-file)")
	f.defineSecretFile(fs, viewerToken, &f.viewerFile, "file holding the viewer token")
	str(&f.environment, "environment", "BULLPEN_ENVIRONMENT", "production", "which pools this stack serves (pools without environment: belong to all)")
	str(&f.controllerID, "controller-id", "BULLPEN_CONTROLLER_ID", "", "tag value marking this stack's machines (default bullpen-ENVIRONMENT)")
	str(&f.replicaID, "replica-id", "BULLPEN_REPLICA_ID", "", "this replica's name in the leases of the loops that run on one replica at a time (default: with an SQLite store, the host name and a hash of --listen and the store's path, so that a serve restarted after a crash takes its leases back at once; else the host name and a random suffix)")
	str(&f.scope, "runner-scope", "BULLPEN_RUNNER_SCOPE", "repo", "where runners register: repo, org or enterprise (with --github-enterprise)")
	str(&f.logLevel, "log-level", "BULLPEN_LOG_LEVEL", "info", "debug, info, warn or error")
	str(&f.logFormat, "log-format", "BULLPEN_LOG_FORMAT", "text", "text or json")
	str(&f.simLatency, "sim-latency", "BULLPEN_SIM_LATENCY", "realistic", "simulated cloud timings: realistic (boot 15s, warm-up 30s, …) or zero")
	fs.Float64Var(&f.simJobsPerMinute, "sim-jobs-per-minute", envDefault(f, "sim-jobs-per-minute", "BULLPEN_SIM_JOBS_PER_MINUTE", 0, parseFloat),
		"with --github sim: the simulated GitHub queues about this many jobs a minute for the pools served, each running 1 to 3 minutes, as in the demo ($BULLPEN_SIM_JOBS_PER_MINUTE)")
	f.defineIntervals(fs, getenv)
	f.aws.define(fs, f)
	f.gh.define(fs, f)
	f.deadlines = domain.DefaultDeadlines()
	fs.Func("deadline", "STATE=DURATION: how long an instance may stay in a state before it is terminated (repeatable; "+deadlineDefaults()+")", func(v string) error {
		return setDeadline(&f.deadlines, v)
	})
	fs.Func("local-agent-env", "with --cloud local: KEY=VALUE added to every machine's agent settings (repeatable), e.g. BULLPEN_AGENT_RUNNER_COMMAND=...", keyValue(&f.localEnv))
	fs.BoolVar(&f.cancelRejected, "cancel-rejected", envDefault(f, "cancel-rejected", "BULLPEN_CANCEL_REJECTED", false, parseBool), "cancel the workflow run of a rejected job once it has stayed rejected for the longer of 2 minutes and two --reload intervals and the configuration in force still does not route it, or it was readmitted 3 times; the reaper looks rejected jobs up on GitHub each cycle (at most 20 a cycle) and cancels while GitHub holds the job queued ($BULLPEN_CANCEL_REJECTED=true)")
}

// keyValue parses a repeatable KEY=VALUE flag into *m.
func keyValue(m *map[string]string) func(string) error {
	return func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("want KEY=VALUE, got %q", v)
		}
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[k] = val
		return nil
	}
}

// defineIntervals defines the loops' intervals and allowances.
func (f *serveFlags) defineIntervals(fs *flag.FlagSet, getenv func(string) string) {
	dur := func(p *time.Duration, name, env string, def time.Duration, usage string) {
		fs.DurationVar(p, name, envDefault(f, name, env, def, time.ParseDuration), usage+" ($"+env+")")
	}
	dur(&f.convergeEvery, "converge-every", "BULLPEN_CONVERGE_EVERY", 30*time.Second, "pool convergence interval")
	dur(&f.terminateEvery, "terminate-every", "BULLPEN_TERMINATE_EVERY", 5*time.Second, "terminator interval")
	dur(&f.reload, "reload", "BULLPEN_RELOAD", 30*time.Second, "configuration re-read interval")
	dur(&f.reapEvery, "reap-every", "BULLPEN_REAP_EVERY", time.Minute, "reaper interval (orphans, gone machines, silent agents, dead runners, missed webhooks, retention)")
	dur(&f.orphanGrace, "orphan-grace", "BULLPEN_ORPHAN_GRACE", 10*time.Minute, "a machine with this stack's tag that no instance knows is terminated once this old")
	dur(&f.goneGrace, "gone-grace", "BULLPEN_GONE_GRACE", 2*time.Minute, "an instance whose machine the cloud no longer lists is closed once its state is this old")
	dur(&f.silentAfter, "silent-after", "BULLPEN_SILENT_AFTER", 3*time.Minute, "an instance whose agent has not been heard from for this long is terminated; one running a job that started only once the cloud or GitHub says the job cannot be running there, or at its running deadline")
	dur(&f.jobRetention, "job-retention", "BULLPEN_JOB_RETENTION", 72*time.Hour, "completed and rejected jobs are deleted this long after they ended")
	dur(&f.instanceRetention, "instance-retention", "BULLPEN_INSTANCE_RETENTION", 24*time.Hour, "terminated instances are deleted from the store this long after they ended")
	dur(&f.danglingAfter, "dangling-after", "BULLPEN_DANGLING_AFTER", 10*time.Minute, "a pool instance running this long without a job (warm-up never finished, never parked) is replaced")
	dur(&f.claimHeartbeat, "claim-heartbeat-max-age", "BULLPEN_CLAIM_HEARTBEAT_MAX_AGE", 15*time.Second, "a reused instance whose last heartbeat is older fails its post-claim check")
	dur(&f.claimRegistration, "claim-registration-timeout", "BULLPEN_CLAIM_REGISTRATION_TIMEOUT", 10*time.Second, "a reused instance must register for its job within this")
	dur(&f.creationTimeout, "creation-timeout", "BULLPEN_CREATION_TIMEOUT", 5*time.Minute, "a new instance must boot and register for its job within this")
	dur(&f.rpRequeueDelay, "resource-pool-requeue-delay", "BULLPEN_RESOURCE_POOL_REQUEUE_DELAY", 3*time.Second, "an idle instance that does not fit a job goes back to the resource pool with this delay")
	dur(&f.redelivery, "redelivery-after", "BULLPEN_REDELIVERY_AFTER", 0, "a queued message taken by a loop that died is taken again after this (default: intake 30s, pool dispatch 1m, provisioning 1m; messages in hand are kept)")
	fs.IntVar(&f.spotBreaker.Interruptions, "spot-breaker-interruptions",
		envDefault(f, "spot-breaker-interruptions", "BULLPEN_SPOT_BREAKER_INTERRUPTIONS", spotbreaker.DefaultInterruptions, parseInt),
		"spot interruptions of a runner class within --spot-breaker-window that switch it to on-demand ($BULLPEN_SPOT_BREAKER_INTERRUPTIONS)")
	dur(&f.spotBreaker.Window, "spot-breaker-window", "BULLPEN_SPOT_BREAKER_WINDOW", spotbreaker.DefaultWindow, "the window in which spot interruptions are counted")
	dur(&f.spotBreaker.Cooldown, "spot-breaker-cooldown", "BULLPEN_SPOT_BREAKER_COOLDOWN", spotbreaker.DefaultCooldown, "how long a runner class stays on-demand once switched")
	dur(&f.leasePeriod, "lease-period", "BULLPEN_LEASE_PERIOD", 30*time.Second, "the converger, reaper and terminator run on one replica at a time, under a lease of this (or twice the loop's interval, if longer); another replica takes a loop over within that once its holder stops")
	dur(&f.recheck, "agent-recheck", "BULLPEN_AGENT_RECHECK", 2*time.Second, "look this often for jobs and releases another replica gave the agents long-polling this one (one store query however many wait), so such a job reaches its agent within this (0: only this replica's assignments wake them)")
	dur(&f.heartbeatFlush, "heartbeat-flush", "BULLPEN_HEARTBEAT_FLUSH", time.Second, "agent heartbeats are written to the store together at this interval")
	dur(&f.shutdownGrace, "shutdown-grace", "BULLPEN_SHUTDOWN_GRACE", time.Minute, "on SIGTERM, how long the loops, and then the requests still open, each get to finish before serve exits anyway, with status 1")
	dur(&f.http.read, "http-read-timeout", "BULLPEN_HTTP_READ_TIMEOUT", defaultHTTPRead, "a request's headers and body must arrive within this (GitHub gives up on a delivery after 10s)")
	dur(&f.http.write, "http-write-timeout", "BULLPEN_HTTP_WRITE_TIMEOUT", defaultHTTPWrite, "a request must be answered within this once its headers are read (agents' long polls get their wait on top)")
	dur(&f.http.idle, "http-idle-timeout", "BULLPEN_HTTP_IDLE_TIMEOUT", defaultHTTPIdle, "a keep-alive connection with no request is closed after this")
}

func cmdServe(ctx context.Context, e *env, args []string) int {
	fs := e.flags("serve")
	var f serveFlags
	f.define(fs, e.getenv)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: bullpen serve [flags]\n\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), serveExitStatuses)
	}
	if status, ok := e.parseFlags(fs, args); !ok {
		if status != 0 {
			return exitConfig // the unit's command line or settings file: no restart mends it
		}
		return status
	}
	// Every problem of the flags and the configuration is named at once.
	log, logErr := newLogger(e, f.logLevel, f.logFormat)
	if logErr != nil {
		log = slog.New(slog.NewTextHandler(e.stderr, nil)) // for the warnings below; the error stops serve
	}
	// Before the problems: a misspelt variable may be their cause.
	for _, v := range f.strayVariables(e.variables()) {
		attrs := []any{"variable", v.name}
		if v.meant != "" {
			attrs = append(attrs, "did_you_mean", v.meant)
		}
		log.Warn("an environment variable names no setting of serve and is ignored", attrs...)
	}
	opts, err := f.options(e, log)
	if err := errors.Join(append(f.envErrors(fs), logErr, err)...); err != nil {
		fmt.Fprintf(e.stderr, "bullpen serve: %v\n", err)
		for _, src := range f.fromEnvironment(fs, err.Error()) {
			fmt.Fprintln(e.stderr, "  ("+src+")")
		}
		return exitConfig
	}
	lns, err := f.openListeners()
	if err != nil {
		fmt.Fprintf(e.stderr, "bullpen serve: %v\n", err)
		return 1
	}
	if opts.AgentURL == "" {
		opts.AgentURL = "http://" + lns.public.Addr().String()
	}
	a, err := app.New(ctx, opts)
	if err != nil {
		lns.close()
		fmt.Fprintf(e.stderr, "bullpen serve: %v\n", err)
		return startStatus(err, f.config)
	}
	defer a.Close()
	f.logProviders(log)
	if f.cloud == "sim" {
		warnSimulatedLeftovers(ctx, a.Store, log)
	}
	if unused := unusedProviderFlags(&f, f.givenFlags(fs)); len(unused) > 0 {
		log.Warn("settings of a provider not in use are ignored", "flags", strings.Join(unused, ","), "cloud", f.cloud, "github", f.github)
	}
	settings := f.http
	settings.grace = f.shutdownGrace
	return serveUntilDone(ctx, a, lns, log, settings)
}

// listeners are serve's open addresses: public always, admin only with
// --admin-listen.
type listeners struct {
	public, admin net.Listener
}

func (l listeners) close() {
	l.public.Close()
	if l.admin != nil {
		l.admin.Close()
	}
}

// openListeners binds --listen and --admin-listen before anything starts,
// so that an address taken stops serve at once, named.
func (f *serveFlags) openListeners() (listeners, error) {
	var l listeners
	var err error
	if l.public, err = net.Listen("tcp", f.listen); err != nil {
		return l, fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	if f.adminListen == "" {
		return l, nil
	}
	if l.admin, err = net.Listen("tcp", f.adminListen); err != nil {
		l.public.Close()
		return l, fmt.Errorf("--admin-listen: listen on %s: %w", f.adminListen, err)
	}
	return l, nil
}

// exitConfig is EX_CONFIG of sysexits.h: serve cannot work with its
// flags, settings or configuration, and no restart mends that, so
// deploy/bullpen.service does not restart it. Not 2: Go exits 2 after a
// panic, which a restart may well mend.
const exitConfig = 78

// serveExitStatuses ends serve -h.
var serveExitStatuses = fmt.Sprintf(`
Exit status: 0 after SIGINT or SIGTERM, the work in hand finished. 1 a failure
a restart may mend: the --listen or --admin-listen address taken; a store,
queue, cloud or GitHub that does not answer; a github:// configuration that
cannot be read or does not validate, with none put in force from it kept in
the store; a shutdown past --shutdown-grace. %d (EX_CONFIG) a start refused, every problem named at
once: flags or variables, agent settings, a configuration file that cannot be
read or does not validate with none put in force from it kept in the store,
autoscaling that the --converge-every cycle never lets scale, a DynamoDB
table without bullpen's keys or indexes, an SQS queue with its own wait or
delay. deploy/bullpen.service restarts serve after anything but 0 and %d
(a crash, which Go ends with 2, included).
`, exitConfig, exitConfig)

// startStatus is serve's exit status after the app refused to start with
// err, its configuration read from config.
func startStatus(err error, config string) int {
	var cadence *autoscale.CadenceError
	switch {
	case errors.As(err, &cadence):
		return exitConfig // the configuration and --converge-every disagree
	case errors.Is(err, agent.ErrBadSettings):
		return exitConfig // no machine's agent can run with them
	case errors.Is(err, dynamodb.ErrTableLayout), errors.Is(err, sqs.ErrQueueSetup):
		return exitConfig // made or changed by hand: bullpen does not alter them
	case errors.Is(err, app.ErrNoConfiguration) && !strings.HasPrefix(config, configsource.Scheme):
		return exitConfig // a file on this machine: a human must mend it
	}
	return 1 // GitHub, the store or the cloud may answer the next start
}

// logProviders says what this process serves with, and warns when it is
// the simulation: a production install whose settings file was not read
// would otherwise run on the simulated cloud and GitHub without a word,
// its jobs assigned to machines that do not exist.
func (f *serveFlags) logProviders(log *slog.Logger) {
	store, _, _ := strings.Cut(f.store, "://")
	log.Info("serving with", "cloud", f.cloud, "github", f.github, "environment", f.environment, "store", store)
	var simulated []string
	if f.cloud == "sim" {
		simulated = append(simulated, "cloud")
	}
	if f.github == "sim" {
		simulated = append(simulated, "github")
	}
	if len(simulated) > 0 {
		log.Warn("serving with simulated providers: no real job is served; set --cloud and --github (BULLPEN_CLOUD, BULLPEN_GITHUB) for real ones",
			"simulated", strings.Join(simulated, ","))
	}
}

// The HTTP server's limits. Until a request is authenticated it is
// anyone's: these bound how long it may hold a connection.
const (
	// defaultHTTPRead bounds a request's headers and body together: GitHub
	// gives up on a delivery after 10 s, and the agents' bodies are small.
	// A slow sender holds a webhook read slot, or delays shutdown, at most
	// this long.
	defaultHTTPRead = 10 * time.Second
	// defaultHTTPWrite bounds the time from a request's headers to the end
	// of its answer: a webhook waits at most 2 s for a read slot and 5 s
	// for the inbox, the API answers from the store, and the agents give
	// their own calls 30 s. Long polls are extended (withLongPollDeadlines).
	defaultHTTPWrite = 30 * time.Second
	// defaultHTTPIdle bounds a keep-alive connection between requests:
	// agents heartbeat every 5 s and keep theirs; anything idler is closed.
	defaultHTTPIdle = 60 * time.Second
	// maxReadHeader bounds the headers alone, within the read timeout.
	maxReadHeader = 10 * time.Second
	// maxHeaderBytes: GitHub's and the agents' headers are a few KB.
	maxHeaderBytes = 64 << 10
)

// httpSettings are the HTTP server's timeouts and the shutdown grace.
type httpSettings struct {
	read, write, idle, grace time.Duration
}

// newHTTPServer serves h with s's timeouts.
func newHTTPServer(h http.Handler, s httpSettings) *http.Server {
	return &http.Server{
		Handler:           withLongPollDeadlines(h, s),
		ReadHeaderTimeout: min(maxReadHeader, s.read),
		ReadTimeout:       s.read,
		WriteTimeout:      s.write,
		IdleTimeout:       s.idle,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// withLongPollDeadlines moves the write deadline of an agent's long poll
// (GET /agent/v1/next, held up to agentapi.MaxWait) past its longest wait,
// rather than raising the write timeout of every route above a minute. The
// read timeout does not reach it: the poll has no body, and net/http lifts
// the read deadline once a body is read. The server sets the write deadline
// afresh for the connection's next request.
func withLongPollDeadlines(h http.Handler, s httpSettings) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == agentapi.PathNext {
			// Only a writer without deadlines (a test recorder) refuses.
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(agentapi.MaxWait + s.write))
		}
		h.ServeHTTP(w, r)
	})
}

func newLogger(e *env, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	o := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(e.stderr, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(e.stderr, o)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// deadlineDefaults lists the default allowance of every state.
func deadlineDefaults() string {
	d := domain.DefaultDeadlines()
	var parts []string
	for _, s := range domain.States {
		if a := d.For(s); a > 0 {
			parts = append(parts, string(s)+"="+a.String())
		}
	}
	return "defaults: " + strings.Join(parts, ", ")
}

// setDeadline applies one STATE=DURATION.
func setDeadline(d *domain.Deadlines, v string) error {
	name, val, ok := strings.Cut(v, "=")
	dur, err := time.ParseDuration(val)
	if !ok || err != nil || dur <= 0 {
		return fmt.Errorf("want STATE=DURATION with a positive duration, got %q", v)
	}
	fields := map[domain.State]*time.Duration{
		domain.StatePending: &d.Pending, domain.StateBooting: &d.Booting, domain.StateReady: &d.Ready,
		domain.StateStopping: &d.Stopping, domain.StateStopped: &d.Stopped, domain.StateClaimed: &d.Claimed,
		domain.StateRunning: &d.Running, domain.StateReleasing: &d.Releasing,
		domain.StateTerminating: &d.Terminating, domain.StateError: &d.Error,
	}
	p, ok := fields[domain.State(name)]
	if !ok {
		return fmt.Errorf("unknown state %q (%s)", name, deadlineDefaults())
	}
	*p = dur
	return nil
}
