// Package intake turns accepted webhook deliveries into jobs: it decides
// whether a job is bullpen's, routes it to the pool queue or the launch
// queue ("Webhook-Level Routing"), rejects jobs that name a pool
// this environment does not have, and records jobs starting and finishing.
package intake

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/labels"
)

// Routing is the configuration the routing decision depends on.
type Routing struct {
	Environment string
	// Region is the stack's cloud region: a job naming another region
	// (region=) is another stack's. "" (a cloud without regions) serves
	// every region.
	Region  string
	Pools   map[string]domain.Pool // the pools of this environment
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
}

// Decide routes a job by its labels. It is pure: the same labels and
// configuration always give the same decision.
func Decide(jobLabels []string, r Routing) Decision {
	exists := func(name string) bool { _, ok := r.Pools[name]; return ok }
	req, err := labels.Parse(jobLabels, exists)
	if !req.Ours {
		return Decision{}
	}
	if req.Env != "" && r.Environment != "" && req.Env != r.Environment {
		return Decision{} // another bullpen deployment's job
	}
	if req.Region != "" && r.Region != "" && req.Region != r.Region {
		return Decision{} // the stack of another region serves it
	}
	if err != nil {
		d := Decision{Ours: true, Reject: err.Error()}
		if errors.Is(err, labels.ErrUnknownPool) {
			d.Pool = req.Pool
			d.Reject = fmt.Sprintf("pool %s is not configured for environment %q (pools: %s)", domain.QuoteShort(req.Pool), r.Environment, names(r.Pools))
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
