package agent

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/spelling"
)

// ErrBadSettings is wrapped by every error of CheckSettings: settings that
// no agent can run with, which neither a restart of the agents nor of the
// control plane mends.
var ErrBadSettings = errors.New("agent settings")

// SettingsLimits are what the control plane expects of its agents, beyond
// what the agent itself needs.
type SettingsLimits struct {
	// SilentAfter is how long the control plane goes without hearing from
	// an agent before it judges it silent and terminates its machine. The
	// heartbeat interval must be at most a third of it, so that an agent
	// that loses one heartbeat, heard late besides (the store keeps a
	// heartbeat's time coarsely), is not taken for dead. Zero checks
	// nothing.
	SilentAfter time.Duration
}

// providerSettings are the settings a provider writes into each machine's
// launch data itself: where the control plane is, the machine's
// credentials and identity, and its state directory. Given for every
// machine at once, a value would be wrong for all of them, or replace one
// the provider relies on.
var providerSettings = map[string]bool{
	"url": true, "launch-id": true, "bootstrap": true, "launch-secret": true,
	"cloud-id": true, "cloud-id-from": true, "state-dir": true,
}

// CheckSettings says why settings given for every machine of a provider
// (NAME=VALUE, as serve's --aws-agent-env and --local-agent-env take them)
// would keep the machines' agents from working, naming every setting at
// fault; nil when they would work. It reads them as the agent reads its
// config file, over the defaults (an empty value keeps the default), and
// refuses what the agent would refuse, a runner command without
// {jitconfig}, a heartbeat interval too long for limits, a BULLPEN_AGENT_*
// name the agent does not know (with the closest one it knows: the agent
// itself would only warn, and go on without it), and the settings the
// provider sets itself. Other names are passed to the agent's commands and
// left alone. An error quotes durations and patterns, never a command: a
// command line may hold a credential.
func CheckSettings(vars map[string]string, limits SettingsLimits) error {
	byEnv := map[string]setting{}
	for _, s := range settings {
		byEnv[s.env()] = s
	}
	cfg := Defaults()
	var problems []string
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		s, ours := byEnv[k]
		switch {
		case ours && providerSettings[s.name]:
			problems = append(problems, k+": the provider sets it for each machine; it cannot be given for all of them")
		case ours && vars[k] != "":
			if err := s.set(&cfg, vars[k]); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", k, err))
			}
		case ours:
		case strings.HasPrefix(strings.ToUpper(k), EnvPrefix):
			problems = append(problems, unknownSetting(k, byEnv))
		}
	}
	if len(problems) == 0 {
		problems = cfg.workProblems(limits, vars)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrBadSettings, strings.Join(problems, "; "))
	}
	return nil
}

// workProblems names the settings of cfg's work that cannot work, given
// as in vars (for the defaults' sake), or that the limits refuse.
func (c Config) workProblems(limits SettingsLimits, vars map[string]string) []string {
	var problems []string
	if !strings.Contains(c.RunnerCommand, JITConfigPlaceholder) {
		problems = append(problems, envName("runner-command")+": "+errNoPlaceholder.Error())
	}
	if _, err := regexp.Compile(c.JobStartedPattern); err != nil {
		problems = append(problems, fmt.Sprintf("%s: %q is not a regular expression", envName("job-started-pattern"), c.JobStartedPattern))
	}
	if limits.SilentAfter > 0 && 3*c.HeartbeatEvery > limits.SilentAfter {
		name := envName("heartbeat-interval")
		given := c.HeartbeatEvery.String()
		if vars[name] == "" {
			given += " (the default)"
		}
		problems = append(problems, fmt.Sprintf("%s: %s is more than a third of the %s after which the control plane "+
			"judges an agent silent: an agent that loses one heartbeat would have its machine terminated",
			name, given, limits.SilentAfter))
	}
	if len(problems) == 0 {
		if err := c.validateWork(); err != nil { // what no setting above names
			problems = append(problems, err.Error())
		}
	}
	return problems
}

// envName is the environment name of the setting named flag.
func envName(flag string) string { return setting{name: flag}.env() }

// unknownSetting says that k is none of the agent's settings, and which
// one it may have meant.
func unknownSetting(k string, byEnv map[string]setting) string {
	msg := k + ": the agent has no such setting"
	// A typo is a few edits away; anything further is a guess, not a hint.
	if best := spelling.Closest(strings.ToUpper(k), slices.Collect(maps.Keys(byEnv)), 3); best != "" {
		return msg + " (did you mean " + best + "?)"
	}
	return msg + " (bullpen agent -h lists them)"
}
