// Package intake turns accepted webhook deliveries into jobs: it decides
// whether a job is this stack's, routes it to the pool queue or the launch
// queue ("Webhook-Level Routing"), rejects jobs that name a pool no
// environment has, and records jobs starting and finishing.
package intake

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/labels"
)

// DefaultEnvironment is the environment of a job without an env= label,
// as RunsOn has it: several stacks reading one configuration file leave
// such a job to the stack of this environment (serve's default).
const DefaultEnvironment = "production"

// EnvLabel is the env= value a job must carry to reach a stack of env:
// none for DefaultEnvironment.
func EnvLabel(env string) string {
	if env == DefaultEnvironment {
		return ""
	}
	return env
}

// Routing is the configuration the routing decision depends on.
type Routing struct {
	// Environment is the stack's (serve's --environment); "" is
	// DefaultEnvironment. The stack serves the jobs of its environment
	// only: those whose env= names it and, in DefaultEnvironment, those
	// without env=.
	Environment string
	// Region is the stack's cloud region: a job naming another region
	// (region=) is another stack's. "" (a cloud without regions) serves
	// every region.
	Region string
	// Pools are the configuration's pools, every environment's: the stack
	// serves those of its environment (config.ServedIn), and knowing the
	// others lets it leave a job naming one of them to their stack instead
	// of rejecting it. Holding only the stack's own pools, it rejects such
	// a job.
	Pools   map[string]domain.Pool
	Runners map[string]domain.RunnerSpec
	// Default is the runner an ad-hoc job (no pool=, no runner=) starts
	// from before its labels' overrides.
	Default domain.RunnerSpec
	// ImageRef resolves an image a job label names (image=) as a runner's
	// image: is resolved: a key of the configuration's images: becomes its
	// entry's reference. Nil: labels' images are taken as written.
	ImageRef func(name string) string
}

// DefaultRunner is the machine of a job that names neither a pool nor a
// runner, unless the configuration defines a runner called "default".
var DefaultRunner = domain.RunnerSpec{
	Name: "default", Image: "ubuntu24-full-x64",
	CPU: domain.Range{Min: 2, Max: 2}, RAM: domain.Range{Min: 8, Max: 8},
	Family: []string{"m7a", "m7i", "c7a", "c7i"},
	Volume: domain.Volume{Type: "gp3", SizeGB: 40, ThroughputMBps: 125, IOPS: 3000},
}

// Decision is where a job goes.
type Decision struct {
	Ours   bool
	Reject string // non-empty: bullpen will not serve it, and why
	Route  domain.Route
	Pool   string
	Runner string // the resource-pool class of its machine
	Spec   domain.RunnerSpec
	// UnknownEnvironment is the env= value of a job that is not ours only
	// because it names an environment no pool of the configuration names:
	// most likely a typo, and then no stack serves it.
	UnknownEnvironment string
}

// Decide routes a job by its labels. It is pure: the same labels and
// configuration always give the same decision. A job of another
// environment or region is not ours: another stack serves or rejects it.
// Environments and regions are compared without case, as GitHub compares
// labels. A job of ours naming another environment's pool is rejected,
// with the env= label it lacks: no other stack takes it.
func Decide(jobLabels []string, r Routing) Decision {
	env := r.Environment
	if env == "" {
		env = DefaultEnvironment
	}
	served := func(name string) bool { p, ok := r.Pools[name]; return ok && config.ServedIn(p, env) }
	req, err := labels.Parse(jobLabels, served)
	if !req.Ours {
		return Decision{}
	}
	jobEnv, jobRegion := req.Env, req.Region
	if err != nil {
		// Parsing stopped at the faulty label: an env= or region= after it
		// still says whose job this is, so that only that stack rejects it
		// (and, with --cancel-rejected, cancels its run).
		jobEnv, jobRegion = labelled(jobLabels, "env"), labelled(jobLabels, "region")
	}
	named := jobEnv
	if jobEnv == "" {
		jobEnv = DefaultEnvironment
	}
	if !strings.EqualFold(jobEnv, env) {
		if named != "" && !knownEnvironment(r.Pools, named) {
			return Decision{UnknownEnvironment: named}
		}
		return Decision{} // the stack of another environment serves it
	}
	if jobRegion != "" && r.Region != "" && !strings.EqualFold(jobRegion, r.Region) {
		return Decision{} // the stack of another region serves it
	}
	if err != nil {
		d := Decision{Ours: true, Reject: err.Error()}
		if errors.Is(err, labels.ErrUnknownPool) {
			d.Pool = req.Pool
			d.Reject = fmt.Sprintf("pool %s is not configured for environment %q (pools: %s)", domain.QuoteShort(req.Pool), env, servedNames(r.Pools, env))
			if p, elsewhere := r.Pools[req.Pool]; elsewhere {
				// Another environment's pool. The job is this stack's (its
				// env= names it, or it has none and this is production):
				// the pool's own stack ignores it, so unless this one says
				// why, the job waits until GitHub drops it.
				d.Reject = fmt.Sprintf("pool %s belongs to environment %q, and the job to %q: add env=%s to its runs-on label",
					domain.QuoteShort(req.Pool), p.Environment, env, p.Environment)
			}
		}
		return d
	}
	if req.Pool != "" {
		p := r.Pools[req.Pool]
		spec, ok := r.Runners[p.Runner]
		if !ok {
			return Decision{Ours: true, Pool: req.Pool, Reject: fmt.Sprintf("pool %q names runner %q, which is not configured", p.Name, p.Runner)}
		}
		return Decision{Ours: true, Route: domain.RoutePool, Pool: p.Name, Runner: spec.Name, Spec: spec}
	}
	base := r.Default
	if base.Name == "" {
		base = DefaultRunner
	}
	if req.Runner != "" {
		spec, ok := r.Runners[req.Runner]
		if !ok {
			return Decision{Ours: true, Reject: fmt.Sprintf("runner %s is not configured (runners: %s)", domain.QuoteShort(req.Runner), names(r.Runners))}
		}
		base = spec
	}
	if r.ImageRef != nil && req.Spec.Image != "" {
		// Before ColdSpec, which compares it with the base's resolved image.
		req.Spec.Image = r.ImageRef(req.Spec.Image)
	}
	spec := req.ColdSpec(base)
	if spec.Image == "" {
		return Decision{Ours: true, Reject: "no image: the labels and the runner give none"}
	}
	return Decision{Ours: true, Route: domain.RouteLaunch, Runner: spec.Name, Spec: spec}
}

// knownEnvironment reports whether env is the default environment or one
// a pool names.
func knownEnvironment(pools map[string]domain.Pool, env string) bool {
	if strings.EqualFold(env, DefaultEnvironment) {
		return true
	}
	for _, p := range pools {
		if strings.EqualFold(p.Environment, env) {
			return true
		}
	}
	return false
}

// servedNames lists the pools of pools that environment env serves.
func servedNames(pools map[string]domain.Pool, env string) string {
	served := map[string]domain.Pool{}
	for name, p := range pools {
		if config.ServedIn(p, env) {
			served[name] = p
		}
	}
	return names(served)
}

// labelled is the value the labels give key, read as labels.Parse reads
// pairs, or "" when none gives it a usable name. It serves labels that
// fail to parse, whose Request stops short of the faulty label.
func labelled(jobLabels []string, key string) string {
	for _, label := range jobLabels {
		for _, pair := range strings.FieldsFunc(label, func(c rune) bool { return c == '/' || c == ',' }) {
			k, v, ok := strings.Cut(pair, "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(k), key) {
				continue
			}
			v = strings.TrimSpace(v)
			if v != "" && strings.IndexFunc(v, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) < 0 {
				return v
			}
		}
	}
	return ""
}

func names[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
