package config

import (
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Spot allocation strategies, as EC2 fleets name them.
var spotStrategies = []string{"price-capacity-optimized", "lowest-price", "capacity-optimized"}

func (p *parser) runners(n *yaml.Node) map[string]domain.RunnerSpec {
	out := make(map[string]domain.RunnerSpec)
	p.entries("runners", "runners", n, func(k, v *yaml.Node) {
		path := join("runners", k.Value)
		p.checkName(path, "runner", k)
		p.runnerNames = append(p.runnerNames, k.Value)
		out[k.Value] = p.runner(path, k, v)
	})
	return out
}

func (p *parser) runner(path string, at, n *yaml.Node) domain.RunnerSpec {
	r := domain.RunnerSpec{Name: at.Value}
	p.fields(path, "runner", at, n, append([]field{
		{key: "image", required: true, parse: func(path string, v *yaml.Node) { r.Image = p.runnerImage(path, v) }},
		{key: "cpu", parse: func(path string, v *yaml.Node) { r.CPU = p.sizeRange(path, "cpu", v) }},
		{key: "ram", parse: func(path string, v *yaml.Node) { r.RAM = p.sizeRange(path, "ram", v) }},
		{key: "family", parse: func(path string, v *yaml.Node) { r.Family = p.family(path, v) }},
		{key: "volume", parse: func(path string, v *yaml.Node) { r.Volume = p.volume(path, v) }},
		{key: "spot", parse: func(path string, v *yaml.Node) { r.Spot = p.spot(path, v) }},
		{key: "retry", parse: func(path string, v *yaml.Node) { r.Retry = p.retry(path, v) }},
	}, runsOnOnlyRunnerKeys...))
	return r
}

// runsOnOnlyRunnerKeys are runner settings of RunsOn that bullpen does not
// act on; files that use them still load, with a warning for each.
var runsOnOnlyRunnerKeys = func() []field {
	var fs []field
	for _, k := range []string{"ami", "disk", "hdd", "ssh", "private", "extras", "tags", "preinstall", "prerun", "nested-virt", "gpu"} {
		fs = append(fs, field{key: k, ignored: true})
	}
	return fs
}()

// sizeRange reads `cpu: 2` (exactly 2) or `cpu: [2, 8]` (anything from the
// smallest to the largest value listed).
func (p *parser) sizeRange(path, key string, n *yaml.Node) domain.Range {
	n = deref(n)
	positive := func(path string, v *yaml.Node) (int, bool) {
		x, ok := p.integer(path, v)
		if ok && x <= 0 {
			p.errorf(deref(v), path, "%s must be > 0, got %d", key, x)
			return 0, false
		}
		return x, ok
	}
	if n == nil || n.Kind != yaml.SequenceNode {
		if isNull(n) || n.Kind != yaml.ScalarNode {
			p.errorf(n, path, "expected an integer or a list of integers, got %s", describe(n))
			return domain.Range{}
		}
		x, _ := positive(path, n)
		return domain.Range{Min: x, Max: x}
	}
	if len(n.Content) == 0 {
		p.errorf(n, path, "%s list is empty (omit %s to allow any)", key, key)
		return domain.Range{}
	}
	var r domain.Range
	for i, item := range n.Content {
		x, ok := positive(index(path, i), item)
		if !ok {
			continue
		}
		if r.Min == 0 || x < r.Min {
			r.Min = x
		}
		r.Max = max(r.Max, x)
	}
	return r
}

// familyRE is an instance family (c7a, m7i-flex), a type (t3.micro) or a
// pattern of either (m7*): what a provider can match instance types by.
var familyRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.*?-]*$`)

func (p *parser) family(path string, n *yaml.Node) []string {
	n = deref(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		if s, ok := p.familyName(path, n); ok {
			return []string{s}
		}
		return nil
	}
	if len(n.Content) == 0 {
		p.errorf(n, path, "family list is empty (omit family to allow any)")
		return nil
	}
	var out []string
	for i, item := range n.Content {
		if s, ok := p.familyName(index(path, i), item); ok {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) familyName(path string, n *yaml.Node) (string, bool) {
	s, ok := p.str(path, n)
	if ok && !familyRE.MatchString(s) {
		p.errorf(n, path, "family %q: want an instance family, a type or a pattern like m7* (lower-case letters, digits, '-', '.', '*', '?')", s)
		return "", false
	}
	return s, ok
}

// volume reads the volume syntax (domain.VolumeForm), reporting every
// problem.
func (p *parser) volume(path string, n *yaml.Node) domain.Volume {
	s, ok := p.str(path, n)
	if !ok {
		return domain.Volume{}
	}
	v, problems := domain.ParseVolume(s)
	for _, problem := range problems {
		p.errorf(deref(n), path, "bad volume %q: %s", s, problem)
	}
	return v
}

// spot reads `spot: false` (on-demand), `spot: true` (the default
// price-capacity-optimized strategy) or a strategy name; "pco" is short for
// price-capacity-optimized.
func (p *parser) spot(path string, n *yaml.Node) string {
	n = deref(n)
	if isScalar(n, "!!bool") {
		if on, ok := p.boolean(path, n); ok && on {
			return spotStrategies[0]
		}
		return ""
	}
	if isScalar(n, "!!str") {
		s := strings.ToLower(n.Value)
		if s == "pco" {
			return spotStrategies[0]
		}
		if slices.Contains(spotStrategies, s) {
			return s
		}
	}
	p.errorf(n, path, "bad spot value %s (expected true, false, price-capacity-optimized, pco, lowest-price or capacity-optimized)", describe(n))
	return ""
}

// retry reads RunsOn's retry: when-interrupted (the default) re-runs a job
// whose spot machine was taken back after it started; false does not.
func (p *parser) retry(path string, n *yaml.Node) string {
	n = deref(n)
	if n != nil && n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.Value) {
		case domain.RetryWhenInterrupted:
			return "" // the default: one spelling for it
		case "false", "no", "off":
			return domain.RetryNever
		}
	}
	p.errorf(n, path, "bad retry value %s (expected when-interrupted or false)", describe(n))
	return ""
}
