package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/configsource"
	"github.com/bullpen-ci/bullpen/internal/demo"
	"github.com/bullpen-ci/bullpen/internal/simagent"
)

// serveSettings are what serve's flags resolve to before the app's options
// are built from them: the secrets, where the state is kept, the
// providers' settings and the simulated timings.
type serveSettings struct {
	secret, token, viewer string
	storePath             string
	shared                *app.Shared
	aws                   app.AWS
	gh                    app.GitHubAPI
	latency               sim.Latency
	agent                 simagent.Options
}

// options turns the flags into the app's options, naming every problem
// of the flags and of the configuration file at once. A file that cannot
// be read or does not validate is left to the app when the flags are
// right: the store may keep the file last put in force to start on.
func (f *serveFlags) options(e *env, log *slog.Logger) (app.Options, error) {
	s, err := f.settings()
	cfg, cfgErr := f.initialConfig()
	if err != nil || cfgErr != nil && s.shared == nil && !fileExists(s.storePath) {
		return app.Options{}, errors.Join(err, cfgErr) // a store yet to be created keeps no configuration
	}
	o := app.Options{
		Config: cfg, ConfigPath: f.config, ConfigInterval: f.reload, Environment: f.environment, StorePath: s.storePath,
		ControllerID: f.controllerID, WebhookSecret: s.secret, AdminToken: s.token, RunnerScope: f.scope, Enterprise: f.gh.enterprise,
		CancelRejected: f.cancelRejected, Clock: clock.Real{}, Log: log, Latency: s.latency, Agent: s.agent,
		TerminateEvery: f.terminateEvery, Cloud: f.cloud, GitHub: f.github, LocalDir: f.localDir, LocalKeep: f.localDir != "", AgentURL: f.agentURL,
		LocalAgentEnv: f.localEnv, ViewerToken: s.viewer, AWS: s.aws, GitHubAPI: s.gh, Shared: s.shared,
		SimJobsPerMinute: f.simJobsPerMinute,
	}
	f.setLoops(&o)
	if o.ReplicaID == "" && s.shared == nil {
		o.ReplicaID = localReplicaID(f.listen, s.storePath)
	}
	return o, nil
}

// localReplicaID names the one serve that can run on this host with this
// listen address and this SQLite file: the port is its to bind, so a serve
// restarted after a crash is the same replica and takes its loops' leases
// back at once, where under a new name it waited for them to run out (a
// minute for the converger, two for the reaper). A shared store keeps the
// host name and a random suffix (the app's default): replicas elsewhere may
// share a host name, and two holders under one name would both run a loop.
// "" (that default too) when the port is the system's choice.
func localReplicaID(listen, storePath string) string {
	_, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" || port == "0" {
		return ""
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return ""
	}
	if abs, err := filepath.Abs(storePath); err == nil {
		storePath = abs
	}
	sum := sha256.Sum256([]byte(listen + "\x00" + storePath))
	return host + "-" + hex.EncodeToString(sum[:3])
}

// settings resolves and checks every flag but the configuration, so that
// one run names all the problems at once.
func (f *serveFlags) settings() (serveSettings, error) {
	var s serveSettings
	var problems []error
	var err error
	s.secret, s.token, err = f.secrets()
	problems = append(problems, err)
	s.viewer, err = f.viewerToken(s.token)
	problems = append(problems, err)
	switch {
	case f.config == "":
		problems = append(problems, errors.New("no configuration: pass --config FILE or set $BULLPEN_CONFIG"))
	case strings.HasPrefix(f.config, configsource.Scheme) && f.github == "sim":
		problems = append(problems, fmt.Errorf("--config %s: a configuration in a GitHub repository needs --github app or token", f.config))
	}
	problems = append(problems, checkRate("sim-jobs-per-minute", f.simJobsPerMinute))
	if f.simJobsPerMinute > 0 && f.github != "sim" {
		problems = append(problems, fmt.Errorf("--sim-jobs-per-minute %v: the simulated jobs need --github sim", f.simJobsPerMinute))
	}
	for _, p := range app.RunnerScopeProblems(f.scope, f.gh.enterprise, f.github) {
		problems = append(problems, errors.New(p))
	}
	s.storePath, s.shared, err = f.state()
	problems = append(problems, err)
	if f.spotBreaker.Interruptions < 1 || f.spotBreaker.Window <= 0 || f.spotBreaker.Cooldown <= 0 {
		problems = append(problems, fmt.Errorf("--spot-breaker-*: want at least 1 interruption and positive durations"))
	}
	if f.redelivery < 0 {
		problems = append(problems, fmt.Errorf("--redelivery-after %s: want a positive duration", f.redelivery))
	}
	s.aws, err = f.cloudOptions()
	problems = append(problems, err)
	problems = append(problems, f.checkHTTP(), f.checkAdminListen(), f.checkDurations())
	s.gh, err = f.githubOptions()
	problems = append(problems, err)
	s.latency, s.agent, err = f.simTimings()
	problems = append(problems, err)
	return s, errors.Join(problems...)
}

// minLoopInterval bounds how often a loop may run: a nanosecond's interval
// is a typo that would spin a CPU.
const minLoopInterval = 100 * time.Millisecond

// checkDurations refuses intervals, graces, timeouts and retentions that
// are not positive, where the loops would quietly take their defaults
// instead, and loop intervals too short to be meant.
func (f *serveFlags) checkDurations() error {
	var problems []error
	for _, d := range []struct {
		flag string
		v    time.Duration
		min  time.Duration
	}{
		{"converge-every", f.convergeEvery, minLoopInterval}, {"terminate-every", f.terminateEvery, minLoopInterval},
		{"reload", f.reload, minLoopInterval}, {"reap-every", f.reapEvery, minLoopInterval},
		{"heartbeat-flush", f.heartbeatFlush, minLoopInterval},
		{"orphan-grace", f.orphanGrace, 1}, {"gone-grace", f.goneGrace, 1}, {"silent-after", f.silentAfter, 1},
		{"job-retention", f.jobRetention, 1}, {"instance-retention", f.instanceRetention, 1},
		{"dangling-after", f.danglingAfter, 1}, {"claim-heartbeat-max-age", f.claimHeartbeat, 1},
		{"claim-registration-timeout", f.claimRegistration, 1}, {"creation-timeout", f.creationTimeout, 1},
		{"resource-pool-requeue-delay", f.rpRequeueDelay, 1}, {"lease-period", f.leasePeriod, 1},
		{"shutdown-grace", f.shutdownGrace, 1},
	} {
		switch {
		case d.v <= 0:
			problems = append(problems, fmt.Errorf("--%s %s: want a positive duration", d.flag, d.v))
		case d.v < d.min:
			problems = append(problems, fmt.Errorf("--%s %s: want at least %s", d.flag, d.v, d.min))
		}
	}
	if f.recheck < 0 {
		problems = append(problems, fmt.Errorf("--agent-recheck %s: want a positive duration, or 0 for none", f.recheck))
	}
	return errors.Join(append(problems, f.checkHeartbeatAllowances()...)...)
}

// checkHeartbeatAllowances refuses a silence allowance or a claim's
// heartbeat age that agents beating as they should cannot meet: every
// instance would be terminated as silent, or fail its post-claim check,
// in a loop. A beat reaches the store up to --heartbeat-flush after the
// agent sends it, and a shared store keeps beats only to its resolution.
func (f *serveFlags) checkHeartbeatAllowances() []error {
	beat, from := f.agentHeartbeat()
	flush := max(f.heartbeatFlush, 0)
	var lag time.Duration
	lagSays := ""
	if strings.HasPrefix(f.store, "dynamodb://") {
		lag, lagSays = app.DefaultHeartbeatResolution, fmt.Sprintf(", and the shared store's heartbeat resolution (%s)", app.DefaultHeartbeatResolution)
	}
	var problems []error
	// Silence: an agent that misses a heartbeat, and whose next one is
	// late besides, is still alive.
	if least := 3*beat + flush + lag; f.silentAfter > 0 && f.silentAfter < least {
		problems = append(problems, fmt.Errorf("--silent-after %s: want at least %s, three of the agents' heartbeats (every %s, %s) and --heartbeat-flush (%s)%s; "+
			"anything shorter terminates healthy instances as silent", f.silentAfter, least, beat, from, flush, lagSays))
	}
	// A claim: an agent that missed one heartbeat passes the check (the
	// store's resolution is allowed for apart).
	if least := 2*beat + flush; f.claimHeartbeat > 0 && f.claimHeartbeat < least {
		problems = append(problems, fmt.Errorf("--claim-heartbeat-max-age %s: want at least %s, two of the agents' heartbeats (every %s, %s) and --heartbeat-flush (%s); "+
			"anything shorter fails healthy reused instances at their post-claim check", f.claimHeartbeat, least, beat, from, flush))
	}
	return problems
}

// agentHeartbeat is how often the agents of the cloud in use beat, and
// what says so: the heartbeat interval of the provider's agent settings,
// else the longer of the agent's default and the one hello gives agents
// that keep their default.
func (f *serveFlags) agentHeartbeat() (time.Duration, string) {
	name := agent.EnvPrefix + "HEARTBEAT_INTERVAL"
	vars := map[string]map[string]string{"aws": f.aws.agentEnv, "local": f.localEnv}[f.cloud]
	if v := vars[name]; v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d, fmt.Sprintf("%s=%s of --%s-agent-env", name, v, f.cloud)
		}
	}
	return max(agent.DefaultHeartbeatEvery, agentapi.HeartbeatEvery), "the agents' default"
}

// cloudOptions checks --cloud and returns the EC2 provider's options when
// it is aws.
func (f *serveFlags) cloudOptions() (app.AWS, error) {
	switch f.cloud {
	case "sim", "local":
		return app.AWS{}, nil
	case "aws":
		return f.aws.options(f.agentURL)
	}
	return app.AWS{}, fmt.Errorf("--cloud %q: want sim, local or aws", f.cloud)
}

// checkHTTP says which of the HTTP server's timeouts are not positive.
func (f *serveFlags) checkHTTP() error {
	var problems []error
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"http-read-timeout", f.http.read}, {"http-write-timeout", f.http.write}, {"http-idle-timeout", f.http.idle}} {
		if t.d <= 0 {
			problems = append(problems, fmt.Errorf("--%s %s: want a positive duration", t.name, t.d))
		}
	}
	return errors.Join(problems...)
}

// checkAdminListen refuses an --admin-listen that --listen already takes:
// the same port on an address that overlaps, spelled alike or not (one
// of them every address, or both naming the same one). The second
// listener could not bind it, and failing to bind is a restart-may-mend
// exit a supervisor would repeat for ever; the split it asks for would
// mean nothing on one address besides. Port 0, the system's choice,
// differs every time.
func (f *serveFlags) checkAdminListen() error {
	if f.adminListen == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(f.adminListen)
	if err != nil {
		return fmt.Errorf("--admin-listen %s: want HOST:PORT", f.adminListen)
	}
	lhost, lport, err := net.SplitHostPort(f.listen)
	if err != nil || !samePort(port, lport) {
		return nil
	}
	if why := hostsOverlap(host, lhost); why != "" {
		return fmt.Errorf("--admin-listen %s is also --listen %s (the same port, and %s): the admin surfaces need an address of their own "+
			"(or leave --admin-listen unset to serve everything on --listen)", f.adminListen, f.listen, why)
	}
	return nil
}

// samePort is whether two ports, by number or service name, are one port
// other than 0.
func samePort(a, b string) bool {
	pa, errA := net.LookupPort("tcp", a)
	pb, errB := net.LookupPort("tcp", b)
	return errA == nil && errB == nil && pa == pb && pa != 0
}

// hostsOverlap says how two listening hosts take one address, "" when
// they do not: either is every address (empty, 0.0.0.0, ::), or both
// resolve to an address in common. A name that does not resolve within a
// moment is left to the bind to judge.
func hostsOverlap(a, b string) string {
	switch {
	case a == b:
		return "the same host"
	case isWildcard(a) || isWildcard(b):
		return "one of them is every address"
	}
	mine := hostAddrs(a)
	for ip := range hostAddrs(b) {
		if mine[ip] {
			return "both are " + ip
		}
	}
	return ""
}

func isWildcard(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}

// hostAddrs is what a listening host resolves to, each address as
// net.IP prints it, so that 127.0.0.1 and ::ffff:127.0.0.1 are one.
func hostAddrs(host string) map[string]bool {
	out := map[string]bool{}
	if ip := net.ParseIP(host); ip != nil {
		out[ip.String()] = true
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addrs, _ := net.DefaultResolver.LookupHost(ctx, host)
	for _, a := range addrs {
		if ip := net.ParseIP(a); ip != nil {
			out[ip.String()] = true
		}
	}
	return out
}

// githubOptions checks --github and returns a real GitHub's settings when
// it is app or token. The simulated cloud's agents only run the simulated
// GitHub's jobs.
func (f *serveFlags) githubOptions() (app.GitHubAPI, error) {
	switch f.github {
	case "sim":
		return app.GitHubAPI{}, nil
	case "app", "token":
		gh, err := f.gh.options(f.github)
		if f.cloud == "sim" {
			err = errors.Join(err, errors.New("--github "+f.github+" with --cloud sim: the simulated cloud's agents cannot run a real GitHub's jobs; use --cloud local or aws"))
		}
		return gh, err
	}
	return app.GitHubAPI{}, fmt.Errorf("--github %q: want sim, app or token", f.github)
}

// simTimings are the simulated cloud's and agents' timings: realistic, or
// zero, where the agents also register and deregister at once.
func (f *serveFlags) simTimings() (sim.Latency, simagent.Options, error) {
	switch f.simLatency {
	case "realistic":
		return demo.DefaultLatency, simagent.Options{WarmUp: demo.DefaultLatency.WarmUp}, nil
	case "zero":
		return sim.Latency{}, simagent.Options{RegisterDelay: -1, DeregisterDelay: -1}, nil
	}
	return sim.Latency{}, simagent.Options{}, fmt.Errorf("--sim-latency %q: want realistic or zero", f.simLatency)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// initialConfig loads --config when it is a file. One in a repository is
// read once GitHub's credentials are, by the app: it is nil here.
func (f *serveFlags) initialConfig() (*config.Config, error) {
	if f.config == "" || strings.HasPrefix(f.config, configsource.Scheme) {
		return nil, nil // settings names a missing flag
	}
	data, err := os.ReadFile(f.config)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	cfg, err := config.Parse(f.config, data)
	var list config.Errors
	if errors.As(err, &list) {
		return nil, fmt.Errorf("the configuration %s has %d problem(s):\n%w", f.config, len(list), err)
	}
	if err != nil {
		return nil, fmt.Errorf("the configuration %s: %w", f.config, err)
	}
	return cfg, nil
}

// setLoops sets the loops' intervals, allowances and leases in o.
func (f *serveFlags) setLoops(o *app.Options) {
	o.Converger.Interval = f.convergeEvery
	o.Reaper.Interval, o.Reaper.OrphanGrace, o.Reaper.GoneGrace = f.reapEvery, f.orphanGrace, f.goneGrace
	o.Reaper.SilentAfter, o.Reaper.JobRetention = f.silentAfter, f.jobRetention
	o.Reaper.InstanceRetention, o.Converger.DanglingAfter = f.instanceRetention, f.danglingAfter
	o.Provision.HeartbeatMaxAge, o.Provision.RegistrationTimeout = f.claimHeartbeat, f.claimRegistration
	o.Provision.CreationTimeout, o.Provision.RequeueDelay = f.creationTimeout, f.rpRequeueDelay
	// On SIGTERM, provisioning stops waiting for booting machines at three
	// quarters of the grace, leaving the rest to terminate them and requeue
	// their jobs, so that serve exits cleanly rather than being cut off.
	o.Provision.StopWait = f.shutdownGrace * 3 / 4
	o.HeartbeatFlush, o.Deadlines = f.heartbeatFlush, f.deadlines
	o.Intake.Visibility, o.Dispatch.Visibility, o.Provision.Visibility = f.redelivery, f.redelivery, f.redelivery
	o.SpotBreaker = f.spotBreaker
	o.ReplicaID, o.LeasePeriod, o.AgentRecheck = f.replicaID, f.leasePeriod, f.recheck
	if f.recheck == 0 {
		o.AgentRecheck = -1 // 0 would mean the default: here it means no rechecks
	}
}

// secrets resolves the webhook secret and admin token, or says how to set
// them. A secret never appears in a message.
func (f *serveFlags) secrets() (secret, token string, err error) {
	need := func(s secretSetting, value, file string) (string, error) {
		v, err := s.resolve(f.getenv, value, file)
		if err == nil && v == "" {
			err = s.missing()
		}
		return v, err
	}
	secret, err1 := need(webhookSecret, f.secret, f.secretFile)
	token, err2 := need(adminToken, f.token, f.tokenFile)
	return secret, token, errors.Join(err1, err2, adminToken.strong(token))
}

// viewerToken resolves the optional viewer token, which must not be the
// admin token: it would sign in as admin.
func (f *serveFlags) viewerToken(admin string) (string, error) {
	v, err := viewerToken.resolve(f.getenv, f.viewer, f.viewerFile)
	if err != nil {
		return "", err
	}
	if v != "" && v == admin {
		return "", errors.New("the viewer token is the admin token: give viewers a token of their own")
	}
	return v, viewerToken.strong(v)
}
