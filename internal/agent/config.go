package agent

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Defaults of the agent's settings.
const (
	DefaultStateDir            = "/var/lib/bullpen-agent"
	DefaultRunnerCommand       = "./run.sh --jitconfig {jitconfig}"
	DefaultJobStartedPattern   = "Running job:"
	DefaultShutdownCommand     = "shutdown -h now"
	DefaultUnreachableDeadline = 20 * time.Minute
	DefaultHeartbeatEvery      = 5 * time.Second
	DefaultSpotWatchEvery      = 5 * time.Second
	DefaultPollWait            = 30 * time.Second
	DefaultBackoffMin          = time.Second
	DefaultBackoffMax          = domain.AgentBackoffMax
	DefaultMetadataURL         = "http://169.254.169.254"
	// JITConfigPlaceholder in the runner command is replaced by the job's
	// runner configuration, quoted for the shell.
	JITConfigPlaceholder = "{jitconfig}"
	// EnvPrefix starts the name of every environment setting of the agent.
	EnvPrefix = "BULLPEN_AGENT_"
)

// Config is everything the agent is told. Commands are shell command lines
// (run with /bin/sh -c) in WorkDir.
type Config struct {
	URL       string // the control plane's base URL (the API is under /agent/v1/)
	LaunchID  string
	Bootstrap string // the machine's own bootstrap secret: a credential
	// LaunchSecret is a launch's secret shared by its machines (an EC2
	// fleet's user data): the agent derives its machine's bootstrap secret
	// from it and its cloud id. A credential.
	LaunchSecret string
	CloudID      string
	// CloudIDFrom reads the cloud id from the machine's metadata service
	// when CloudID is empty: "imds" (EC2, IMDSv2) or "digitalocean".
	CloudIDFrom string
	MetadataURL string // the metadata service's base URL

	StateDir          string // the token is kept here (0600)
	WorkDir           string // where commands run; "" is the agent's own
	RunnerCommand     string
	JobStartedPattern string // a regexp matched against each line the runner prints
	WarmUpCommand     string // optional: warm is signalled once it succeeds
	CleanupCommand    string // optional: run at each release
	ShutdownCommand   string

	UnreachableDeadline time.Duration // shut down after this long without the control plane
	HeartbeatEvery      time.Duration
	// SpotWatchEvery is how often EC2's spot interruption notice is looked
	// for (with cloud-id-from imds); 0 never.
	SpotWatchEvery time.Duration
	PollWait       time.Duration // how long each long poll for an instruction is held
	BackoffMin     time.Duration
	BackoffMax     time.Duration

	// Env holds KEY=VALUE pairs for the commands: the settings of the
	// config file that are not the agent's own (RUNNER_ALLOW_RUNASROOT, …).
	Env      []string
	LogLevel slog.Level
}

// Defaults returns a Config with every default filled in.
func Defaults() Config {
	return Config{
		MetadataURL: DefaultMetadataURL, StateDir: DefaultStateDir,
		RunnerCommand: DefaultRunnerCommand, JobStartedPattern: DefaultJobStartedPattern,
		ShutdownCommand: DefaultShutdownCommand, UnreachableDeadline: DefaultUnreachableDeadline,
		HeartbeatEvery: DefaultHeartbeatEvery, PollWait: DefaultPollWait, SpotWatchEvery: DefaultSpotWatchEvery,
		BackoffMin: DefaultBackoffMin, BackoffMax: DefaultBackoffMax, LogLevel: slog.LevelInfo,
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return errors.New("no control plane URL (--url, " + EnvPrefix + "URL)")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("control plane URL %q: want http(s)://host[:port]", c.URL)
	case c.CloudID == "" && c.CloudIDFrom == "":
		return errors.New("no cloud id (--cloud-id, or --cloud-id-from imds|digitalocean)")
	case c.CloudID == "" && c.CloudIDFrom != "imds" && c.CloudIDFrom != "digitalocean":
		return fmt.Errorf("--cloud-id-from %q: want imds or digitalocean", c.CloudIDFrom)
	case c.Bootstrap != "" && c.LaunchSecret != "":
		// The launch data says which secret the machine holds: its own, or
		// the launch's to derive it from. Both is a mistake, not a choice.
		return errors.New("both a machine bootstrap secret (" + EnvPrefix + "BOOTSTRAP) and a launch secret (" +
			EnvPrefix + "LAUNCH_SECRET): the launch data gives one")
	case c.StateDir == "":
		return errors.New("no state directory (--state-dir)")
	}
	return c.validateWork()
}

// validateWork reports the first setting of the agent's work (its commands,
// pattern and durations) that cannot work.
func (c Config) validateWork() error {
	switch {
	case c.RunnerCommand == "" || c.ShutdownCommand == "":
		return errors.New("the runner and shutdown commands cannot be empty")
	case !strings.Contains(c.RunnerCommand, JITConfigPlaceholder):
		return errNoPlaceholder
	case c.UnreachableDeadline <= 0 || c.HeartbeatEvery <= 0 || c.PollWait <= 0 || c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin:
		return errors.New("durations must be positive, and the backoff maximum at least its minimum")
	}
	if _, err := regexp.Compile(c.JobStartedPattern); err != nil || c.JobStartedPattern == "" {
		return fmt.Errorf("job-started pattern %q: not a regular expression", c.JobStartedPattern)
	}
	return nil
}

// errNoPlaceholder: the runner gets its job's configuration only where the
// command says {jitconfig}; without it every runner would start with none.
var errNoPlaceholder = errors.New("the runner command has no " + JITConfigPlaceholder +
	": its runner would never get a job's configuration")

// machineSecret is the bootstrap secret hello presents for the machine
// cloudID: the machine's own when the launch data holds it, else derived
// from the launch's secret; "" when there is neither.
func (c Config) machineSecret(cloudID string) string {
	if c.Bootstrap != "" || c.LaunchSecret == "" {
		return c.Bootstrap
	}
	return domain.MachineSecret(c.LaunchSecret, cloudID)
}

// setting is one configuration value with its flag and environment name.
type setting struct {
	name  string // flag name; the environment name is EnvPrefix + NAME_IN_CAPS
	usage string
	set   func(c *Config, v string) error
}

func (s setting) env() string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(s.name, "-", "_"))
}

func str(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *field(c) = v; return nil }
}

func dur(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a positive duration (like 30s or 20m)", v)
		}
		*field(c) = d
		return nil
	}
}

var settings = []setting{
	{"url", "control plane base URL", str(func(c *Config) *string { return &c.URL })},
	{"launch-id", "launch id, from the launch data", str(func(c *Config) *string { return &c.LaunchID })},
	{"bootstrap", "this machine's bootstrap secret (prefer the config file: command lines are visible to other users)", str(func(c *Config) *string { return &c.Bootstrap })},
	{"launch-secret", "the launch's secret, shared by its machines: the agent derives its machine's own (prefer the config file)", str(func(c *Config) *string { return &c.LaunchSecret })},
	{"cloud-id", "this machine's cloud id", str(func(c *Config) *string { return &c.CloudID })},
	{"cloud-id-from", "read the cloud id from the metadata service: imds (EC2) or digitalocean", str(func(c *Config) *string { return &c.CloudIDFrom })},
	{"metadata-url", "metadata service base URL (default " + DefaultMetadataURL + ")", str(func(c *Config) *string { return &c.MetadataURL })},
	{"state-dir", "directory keeping the instance token (default " + DefaultStateDir + ")", str(func(c *Config) *string { return &c.StateDir })},
	{"work-dir", "directory the runner, warm-up and cleanup commands run in", str(func(c *Config) *string { return &c.WorkDir })},
	{"runner-command", "runner command; " + JITConfigPlaceholder + " is replaced by the job's runner config (default \"" + DefaultRunnerCommand + "\")", str(func(c *Config) *string { return &c.RunnerCommand })},
	{"job-started-pattern", "regexp of the runner output line saying its job started (default \"" + DefaultJobStartedPattern + "\")", str(func(c *Config) *string { return &c.JobStartedPattern })},
	{"warmup-command", "command run once at start; warm is signalled when it succeeds", str(func(c *Config) *string { return &c.WarmUpCommand })},
	{"cleanup-command", "command run at each release, before deregistered is signalled", str(func(c *Config) *string { return &c.CleanupCommand })},
	{"shutdown-command", "command run when the control plane stays unreachable (default \"" + DefaultShutdownCommand + "\")", str(func(c *Config) *string { return &c.ShutdownCommand })},
	{"unreachable-deadline", "shut the machine down after the control plane is unreachable this long (default 20m)", dur(func(c *Config) *time.Duration { return &c.UnreachableDeadline })},
	{"heartbeat-interval", "time between heartbeats (default 5s)", dur(func(c *Config) *time.Duration { return &c.HeartbeatEvery })},
	{"spot-watch-interval", "with cloud-id-from imds: how often EC2's spot interruption notice is looked for (default 5s)", dur(func(c *Config) *time.Duration { return &c.SpotWatchEvery })},
	{"poll-wait", "how long each long poll for an instruction is held (default 30s, at most 60s)", dur(func(c *Config) *time.Duration { return &c.PollWait })},
	{"log-level", "debug, info, warn or error (default info)", func(c *Config, v string) error { return c.LogLevel.UnmarshalText([]byte(v)) }},
}

// LoadConfig builds the configuration from, in increasing precedence, the
// defaults, the --config file (an environment file as launchdata.EnvFile
// writes it), the environment (BULLPEN_AGENT_*), and flags. It returns
// warnings (unknown BULLPEN_AGENT_* names in the file) beside the config;
// flag.ErrHelp for -h; an error wrapping ErrConfigUnreadable when the file
// cannot be read, any other error being settings that cannot work.
func LoadConfig(args []string, getenv func(string) string, usage io.Writer) (Config, []string, error) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: bullpen agent [--config FILE] [flags]\n\n"+
			"Settings come from, in increasing precedence: defaults, the --config file,\n"+
			"BULLPEN_AGENT_* environment variables, flags.\n\n")
		fs.PrintDefaults()
	}
	configPath := fs.String("config", "", "environment file with BULLPEN_AGENT_* settings (written by the launch data)")
	values := make([]*string, len(settings))
	for i, s := range settings {
		values[i] = fs.String(s.name, "", s.usage+" ["+s.env()+"]")
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, nil, err
	}
	if fs.NArg() > 0 {
		return Config{}, nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	cfg := Defaults()
	var warnings []string
	if *configPath != "" {
		var err error
		if warnings, err = applyFile(&cfg, *configPath); err != nil {
			return Config{}, nil, err
		}
	}
	flagged := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { flagged[f.Name] = true })
	for i, s := range settings {
		v, from := getenv(s.env()), s.env()
		if flagged[s.name] {
			v, from = *values[i], "--"+s.name
		}
		if v == "" {
			continue
		}
		if err := s.set(&cfg, v); err != nil {
			return Config{}, nil, fmt.Errorf("%s: %w", from, err)
		}
	}
	return cfg, warnings, cfg.Validate()
}

// ErrConfigUnreadable is wrapped by LoadConfig's error when the config
// file could not be read at all: the machine may yet mend that (a file
// written late, a passing I/O error), where settings that cannot work
// stay so however often the agent starts.
var ErrConfigUnreadable = errors.New("read config")

func applyFile(cfg *Config, path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfigUnreadable, err)
	}
	vars, err := ParseEnvFile(string(data))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	byEnv := map[string]setting{}
	for _, s := range settings {
		byEnv[s.env()] = s
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var warnings []string
	for _, k := range keys {
		s, ours := byEnv[k]
		switch {
		case ours && vars[k] != "":
			if err := s.set(cfg, vars[k]); err != nil {
				return nil, fmt.Errorf("config %s: %s: %w", path, k, err)
			}
		case ours:
		case strings.HasPrefix(k, EnvPrefix):
			warnings = append(warnings, fmt.Sprintf("config %s: unknown setting %s ignored", path, k))
		default:
			cfg.Env = append(cfg.Env, k+"="+vars[k])
		}
	}
	return warnings, nil
}
