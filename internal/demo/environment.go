package demo

import (
	"fmt"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/config"
)

// DefaultEnvironment is the environment a run serves when none is given
// and no pool names one: serve's default.
const DefaultEnvironment = "production"

// Environment is the environment a run of cfg serves: env when set, else
// that of the first pool that names one (so that a file written for one
// environment is served whole), else DefaultEnvironment. A named
// environment that no pool of cfg belongs to is an error naming those the
// pools have: a run of it would serve nothing and reject every job.
func Environment(cfg *config.Config, env string) (string, error) {
	if env == "" {
		for _, p := range cfg.Pools {
			if p.Environment != "" {
				return p.Environment, nil
			}
		}
		return DefaultEnvironment, nil
	}
	if len(cfg.Pools) > 0 && len(cfg.PoolsFor(env)) == 0 {
		return "", fmt.Errorf("no pool of the configuration belongs to environment %q: its pools' environments are %s",
			env, strings.Join(cfg.Environments(), ", "))
	}
	return env, nil
}

// OtherPools lists the pools of cfg that a run serving env leaves out, as
// "name@environment", in the file's order.
func OtherPools(cfg *config.Config, env string) []string {
	var out []string
	for _, p := range cfg.Pools {
		if !config.ServedIn(p, env) {
			out = append(out, p.Name+"@"+p.Environment)
		}
	}
	return out
}

// environmentWarning says, when cfg names environments but none is env,
// that a run of env serves only the pools that name none: the demo runs
// such a file, but a stack deployed with env would leave every job meant
// for the file's environments unanswered, so the flag is most likely not
// the one meant. It is "" otherwise.
func environmentWarning(cfg *config.Config, env string) string {
	named := cfg.Environments()
	if len(named) == 0 || cfg.NamesEnvironment(env) {
		return ""
	}
	var served []string
	for _, p := range cfg.PoolsFor(env) {
		served = append(served, p.Name)
	}
	what := "none is served"
	if len(served) > 0 {
		what = "only pools naming none are served (" + strings.Join(served, ", ") + ")"
	}
	return fmt.Sprintf("no pool names environment %s: %s; the file's environments are %s (pick one with --environment)",
		env, what, strings.Join(named, ", "))
}
