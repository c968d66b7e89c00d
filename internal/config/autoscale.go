package config

import (
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

// autoscaleBlock reads a pool's `autoscale:` block over bullpen's defaults
// (internal/autoscale.DefaultParams, with min 0 and one runner per
// instance) and validates it as the standalone autoscaler does, the
// unreachable-threshold check included.
func (p *parser) autoscaleBlock(path string, at, n *yaml.Node) *domain.AutoscaleSpec {
	a := autoscale.DefaultParams()
	a.MinInstances, a.RunnersPerInstance = 0, 1
	in := func(dst *int) func(string, *yaml.Node) {
		return func(path string, v *yaml.Node) { *dst, _ = p.integer(path, v) }
	}
	fl := func(dst *float64) func(string, *yaml.Node) {
		return func(path string, v *yaml.Node) { *dst = p.float(path, v) }
	}
	dur := func(dst *time.Duration) func(string, *yaml.Node) {
		return func(path string, v *yaml.Node) {
			if d, ok := p.duration(path, v); ok {
				*dst = d
			}
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
	if a.MaxInstances > MaxPoolSize {
		p.errorf(deref(at), path, "max must be at most %d, got %d", MaxPoolSize, a.MaxInstances)
	}
	if err := a.ValidateFloor(0); err != nil {
		if pe, ok := err.(*autoscale.ParamsError); ok {
			for _, pr := range pe.Problems {
				key := autoscaleKeys[pr.Param]
				if key == "" {
					key = strings.ToLower(pr.Param)
				}
				p.errorf(deref(at), path, "%s=%s %s", key, pr.Value, keyed(pr.Reason))
			}
		} else {
			p.errorf(deref(at), path, "%v", err)
		}
	}
	spec := autoscale.SpecOf(a)
	return &spec
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

func (p *parser) float(path string, n *yaml.Node) float64 {
	n = deref(n)
	if n != nil && n.Kind == yaml.ScalarNode {
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil {
			return f
		}
	}
	p.errorf(n, path, "expected a number, got %s", describe(n))
	return 0
}
