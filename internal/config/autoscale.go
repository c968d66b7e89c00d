package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bullpen-ci/bullpen/internal/autoscale"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// autoscaleKeys maps the specification's parameter names (what autoscale reports
// problems with) to the keys of a pool's autoscale block.
var autoscaleKeys = map[string]string{
	"MIN_INSTANCES": "min", "MAX_INSTANCES": "max", "RUNNERS_PER_INSTANCE": "runners-per-instance",
	"POLL_INTERVAL": "poll-interval", "SCALE_UP_THRESHOLD": "scale-up-threshold",
	"SCALE_DOWN_THRESHOLD": "scale-down-threshold", "SCALE_UP_COOLDOWN": "scale-up-cooldown",
	"SCALE_DOWN_COOLDOWN": "scale-down-cooldown", "SCALE_UP_STEP": "scale-up-step", "SCALE_DOWN_STEP": "scale-down-step",
	"SCALE_UP_PROPORTION": "scale-up-proportion", "SCALE_DOWN_PROPORTION": "scale-down-proportion",
	"STABILIZATION_WINDOW_MINUTES": "stabilization-window", "DECAY_HALF_LIFE_SECONDS": "decay-half-life",
	"BREACH_THRESHOLD": "breach-threshold",
}

// autoscaleRead is a pool's autoscale block as read: its parameters, and
// what the pool's own checks need to know about its max.
type autoscaleRead struct {
	spec *domain.AutoscaleSpec
	// maxAt is the value of max, nil when the block leaves max to its
	// default; maxValid is false when max is already reported as wrong.
	maxAt    *yaml.Node
	maxValid bool
}

// autoscaleBlock reads a pool's `autoscale:` block over bullpen's defaults
// (internal/autoscale.DefaultParams, with min 0 and one runner per
// instance) and validates it as the standalone autoscaler does, the
// unreachable-threshold check included. Each problem is reported at the
// value at fault; a value that does not parse keeps its default and is left
// out of the checks that follow, which would only restate it.
func (p *parser) autoscaleBlock(path string, at, n *yaml.Node) autoscaleRead {
	a := autoscale.DefaultParams()
	a.MinInstances, a.RunnersPerInstance = 0, 1
	written := map[string]*yaml.Node{} // key → its value
	bad := map[string]bool{}           // keys already reported
	keep := func(key string, v *yaml.Node, ok bool) {
		written[key] = deref(v)
		if !ok {
			bad[key] = true
		}
	}
	in := func(dst *int) func(string, *yaml.Node) {
		return func(path string, v *yaml.Node) {
			i, ok := p.integer(path, v)
			if ok {
				*dst = i
			}
			keep(lastKey(path), v, ok)
		}
	}
	fl := func(dst *float64) func(string, *yaml.Node) {
		return func(path string, v *yaml.Node) {
			f, ok := p.float(path, v)
			if ok {
				*dst = f
			}
			keep(lastKey(path), v, ok)
		}
	}
	dur := func(dst *time.Duration) func(string, *yaml.Node) {
		return func(path string, v *yaml.Node) {
			d, ok := p.duration(path, v)
			if ok {
				*dst = d
			}
			keep(lastKey(path), v, ok)
		}
	}
	p.fields(path, "autoscale block", at, n, []field{
		{key: "min", parse: in(&a.MinInstances)}, {key: "max", parse: in(&a.MaxInstances)},
		{key: "runners-per-instance", parse: in(&a.RunnersPerInstance)},
		{key: "poll-interval", parse: dur(&a.PollInterval)},
		{key: "scale-up-threshold", parse: fl(&a.ScaleUpThreshold)}, {key: "scale-down-threshold", parse: fl(&a.ScaleDownThreshold)},
		{key: "scale-up-cooldown", parse: dur(&a.ScaleUpCooldown)}, {key: "scale-down-cooldown", parse: dur(&a.ScaleDownCooldown)},
		{key: "scale-up-step", parse: in(&a.ScaleUpStep)}, {key: "scale-down-step", parse: in(&a.ScaleDownStep)},
		{key: "scale-up-proportion", parse: fl(&a.ScaleUpProportion)}, {key: "scale-down-proportion", parse: fl(&a.ScaleDownProportion)},
		{key: "stabilization-window", parse: dur(&a.StabilizationWindow)}, {key: "decay-half-life", parse: dur(&a.DecayHalfLife)},
		{key: "breach-threshold", parse: fl(&a.BreachThreshold)},
	})
	// The autoscaler counts demand in runners and converts it to machines
	// by this ratio; a pool's machine takes one job at a time, so any other
	// ratio would size the pool for jobs it cannot run (4 would keep a
	// quarter of the machines the queue needs).
	if v := written["runners-per-instance"]; v != nil && !bad["runners-per-instance"] && a.RunnersPerInstance != 1 {
		p.errorf(v, path,
			"runners-per-instance must be 1 in a pool's autoscale block, got %d: a pool's machine runs one job at a time (omit the key)", a.RunnersPerInstance)
		bad["runners-per-instance"] = true
		a.RunnersPerInstance = 1
	}
	if v := written["max"]; v != nil && !bad["max"] && a.MaxInstances > MaxPoolSize {
		p.errorf(v, path, "max must be at most %d, got %d", MaxPoolSize, a.MaxInstances)
		bad["max"] = true
	}
	if err := a.ValidateFloor(0); err != nil {
		pe, ok := err.(*autoscale.ParamsError)
		if !ok {
			p.errorf(deref(at), path, "%v", err)
		}
		for _, pr := range problemsOf(pe) {
			key := autoscaleKeys[pr.Param]
			if key == "" {
				key = strings.ToLower(pr.Param)
			}
			if restates(pr, bad) {
				continue
			}
			bad[key] = true
			msg := fmt.Sprintf("%s=%s %s", key, pr.Value, keyed(pr.Reason))
			v := written[key]
			if v == nil {
				// A default is only wrong next to a value written elsewhere
				// in the block; the block is where both can be seen.
				v = deref(at)
				msg += fmt.Sprintf(" (%s is not set: %s=%s is the default)", key, key, pr.Value)
			}
			p.errorf(v, path, "%s", msg)
		}
	}
	// A block that is not a mapping, already reported, has no max to hold
	// the schedule to.
	if m := deref(n); m == nil || m.Kind != yaml.MappingNode {
		bad["max"] = true
	}
	spec := autoscale.SpecOf(a)
	return autoscaleRead{spec: &spec, maxAt: written["max"], maxValid: !bad["max"]}
}

func problemsOf(pe *autoscale.ParamsError) []autoscale.Problem {
	if pe == nil {
		return nil
	}
	return pe.Problems
}

// restates reports whether pr is about a key already reported, or is a
// check that reads one (its reason names it): either way it adds nothing.
func restates(pr autoscale.Problem, bad map[string]bool) bool {
	for param, key := range autoscaleKeys {
		if bad[key] && (pr.Param == param || strings.Contains(pr.Reason, param+"=")) {
			return true
		}
	}
	return false
}

// lastKey is the key a path ends with.
func lastKey(path string) string {
	return path[strings.LastIndex(path, ".")+1:]
}

// unitless are the specification's variables whose values are plain numbers of a
// unit; the block writes them as durations.
var unitless = regexp.MustCompile(`(DECAY_HALF_LIFE_SECONDS|STABILIZATION_WINDOW_MINUTES)=([0-9.]+)`)

// keyed rewrites the specification's variable names in a message to the block's keys.
func keyed(msg string) string {
	msg = unitless.ReplaceAllStringFunc(msg, func(m string) string {
		sub := unitless.FindStringSubmatch(m)
		unit := "s"
		if sub[1] == "STABILIZATION_WINDOW_MINUTES" {
			unit = "m"
		}
		return sub[1] + "=" + sub[2] + unit
	})
	for env, key := range autoscaleKeys {
		msg = strings.ReplaceAll(msg, env, key)
	}
	return msg
}

func (p *parser) float(path string, n *yaml.Node) (float64, bool) {
	n = deref(n)
	if n != nil && n.Kind == yaml.ScalarNode {
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil {
			return f, true
		}
	}
	p.errorf(n, path, "expected a number, got %s", describe(n))
	return 0, false
}
