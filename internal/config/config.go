// Package config reads bullpen's pool configuration: the runs-on.yml format
// of RunsOn (runners:, pools:, images:) with bullpen's own pool settings.
// Every problem in a file is reported at once, each with its line and
// column (see Errors).
//
// A runner's `image:` that is a key of `images:` is replaced, while parsing,
// by the reference its entry gives (Image.Ref): the entry's AMI id, or
// OWNER/NAME, or its name alone when it has no owner. Any other `image:` is
// kept as written, for the cloud provider to resolve: an AMI id, OWNER/NAME,
// or a name (a RunsOn image name, a pattern) looked up among the provider's
// configured owners; a name that looks like a misspelt key gets a warning.
// What reaches the provider, and the spec hash of a pool, is therefore the
// reference itself: editing an images entry rolls the pools that use it,
// renaming its key does not.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	// The tz database is built in so that pool timezones validate and
	// resolve the same way on a minimal container image as on a laptop.
	_ "time/tzdata"

	"go.yaml.in/yaml/v3"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Config is one parsed configuration file.
type Config struct {
	Runners map[string]domain.RunnerSpec
	Images  map[string]Image
	Pools   []domain.Pool // in file order
	// Warnings are things the file does that bullpen ignores (RunsOn-only
	// settings), as positioned messages.
	Warnings Errors

	file string // as Parse was given it, for problems found after parsing
	// autoscaleAt is where each pool's autoscale block is written: its key,
	// or the pool's key when a merge brings the block in.
	autoscaleAt map[string]position
}

// position is a 1-based line and column in the file.
type position struct{ line, col int }

// Pool returns the pool called name.
func (c *Config) Pool(name string) (domain.Pool, bool) {
	for _, p := range c.Pools {
		if p.Name == name {
			return p, true
		}
	}
	return domain.Pool{}, false
}

// PoolsFor returns, in file order, the pools of one environment (one
// bullpen deployment). A pool without `environment:` belongs to every
// environment, so a file shared by several deployments can define a pool
// once for all of them.
func (c *Config) PoolsFor(environment string) []domain.Pool {
	var out []domain.Pool
	for _, p := range c.Pools {
		if ServedIn(p, environment) {
			out = append(out, p)
		}
	}
	return out
}

// Environments lists the environments the file's pools name, sorted, each
// once.
func (c *Config) Environments() []string {
	var out []string
	for _, p := range c.Pools {
		if p.Environment != "" && !slices.ContainsFunc(out, func(e string) bool { return strings.EqualFold(e, p.Environment) }) {
			out = append(out, p.Environment)
		}
	}
	slices.Sort(out)
	return out
}

// NamesEnvironment reports whether a pool of the file names environment,
// compared as ServedIn compares it.
func (c *Config) NamesEnvironment(environment string) bool {
	return slices.ContainsFunc(c.Pools, func(p domain.Pool) bool {
		return p.Environment != "" && strings.EqualFold(p.Environment, environment)
	})
}

// ServedIn reports whether the deployment of environment serves pool p.
func ServedIn(p domain.Pool, environment string) bool {
	return p.Environment == "" || strings.EqualFold(p.Environment, environment)
}

// Runner returns the runner spec called name.
func (c *Config) Runner(name string) (domain.RunnerSpec, bool) {
	r, ok := c.Runners[name]
	return r, ok
}

// Load reads and parses the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data)
}

// Parse reads a configuration; filename is only used in messages. When the
// file is invalid the error is an Errors listing every problem.
func Parse(filename string, data []byte) (*Config, error) {
	if len(data) > domain.MaxConfigurationBytes {
		// Far over any real file, and more than the store keeps for a
		// start whose source fails.
		return nil, Errors{{File: filename, Line: 1, Col: 1,
			Msg: fmt.Sprintf("the file is %d bytes, over the %d a configuration may be", len(data), domain.MaxConfigurationBytes)}}
	}
	root, errs := decode(filename, data)
	if len(errs) > 0 {
		return nil, errs
	}
	if isNull(deref(root)) {
		// Most likely a file caught in the middle of a write that is not
		// atomic, or the wrong file: put in force, it would drain every
		// pool and reject every pool job.
		return nil, Errors{{File: filename, Line: 1, Col: 1, Msg: "the file holds no configuration; to have no pools, write pools: {}"}}
	}
	p := &parser{file: filename, autoscaleAt: map[string]position{}}
	cfg := p.config(root)
	if len(p.errs) > 0 {
		p.errs.sort()
		return nil, p.errs
	}
	p.warnings.sort()
	cfg.Warnings, cfg.file, cfg.autoscaleAt = p.warnings, filename, p.autoscaleAt
	return cfg, nil
}

// decode parses the YAML into a node tree: the content of its one document,
// or nil for an empty file.
func decode(file string, data []byte) (root *yaml.Node, errs Errors) {
	defer func() {
		// yaml.v3 turns its own failures into errors; anything else is a
		// parser bug, and a bad file must still never crash the caller.
		if r := recover(); r != nil {
			root, errs = nil, Errors{{File: file, Line: 1, Col: 1, Msg: fmt.Sprintf("YAML parser failed: %v", r)}}
		}
	}()
	doc, extra, err := readDocuments(data)
	switch {
	case err != nil:
		line, msg := splitYAMLError(err)
		line, col := locateSyntaxError(data, line, msg)
		return nil, Errors{{File: file, Line: line, Col: col, Msg: "YAML syntax error: " + msg}}
	case extra != nil && len(extra.Content) > 0 && !isNull(extra.Content[0]):
		at := extra.Content[0]
		return nil, Errors{{File: file, Line: at.Line, Col: at.Column, Msg: "more than one YAML document (expected one)"}}
	case doc == nil || len(doc.Content) == 0:
		return nil, nil
	}
	return doc.Content[0], nil
}

// readDocuments parses the first document and, to refuse it, a second one.
func readDocuments(data []byte) (first, second *yaml.Node, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for _, dst := range []**yaml.Node{&first, &second} {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				return first, second, nil
			}
			return nil, nil, err
		}
		*dst = &n
	}
	return first, second, nil
}

// locateSyntaxError improves on yaml.v3's position, which is often where the
// enclosing block starts rather than the offending line. It looks for the
// line after which the file, cut there, starts failing with the same
// message, by bisection between the reported line and the end (an error
// rarely goes away when more lines follow), and returns that line and its
// first non-blank column.
func locateSyntaxError(data []byte, line int, msg string) (int, int) {
	lines := bytes.SplitAfter(data, []byte("\n"))
	failsThere := func(k int) bool {
		_, _, err := readDocuments(bytes.Join(lines[:k], nil))
		if err == nil {
			return false
		}
		_, m := splitYAMLError(err)
		return m == msg
	}
	lo, hi := max(line, 1)-1, len(lines) // lines[:lo] is assumed fine; lines[:hi] fails
	if hi <= lo {
		return line, 1
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if failsThere(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	text := lines[hi-1]
	return hi, len(text) - len(bytes.TrimLeft(text, " ")) + 1
}

func (p *parser) config(root *yaml.Node) *Config {
	var runners, images, pools *yaml.Node
	keep := func(dst **yaml.Node) func(string, *yaml.Node) {
		return func(_ string, v *yaml.Node) { *dst = v }
	}
	p.fields("", "configuration file", root, root, []field{
		{key: "runners", parse: keep(&runners)},
		{key: "pools", parse: keep(&pools)},
		{key: "images", parse: keep(&images)},
		// RunsOn settings bullpen has no use for.
		{key: "admins"},
		// Files that inherit from another (RunsOn reads the named
		// repository's file first) lose what they inherit here: say so.
		{key: "_extends", parse: func(path string, v *yaml.Node) {
			from := describe(deref(v))
			p.warnf(deref(v), path, "bullpen does not follow _extends: the settings of %s are not read, only this file's; copy the runners and pools this file needs into it", from)
		}},
	})
	// A file that stops before its pools is most likely cut short by a
	// write that is not atomic (pools come last in most files), or is the
	// wrong file: put in force, it would drain every pool. No pools at all
	// is written out.
	if deref(root).Kind == yaml.MappingNode && pools == nil {
		p.errorf(deref(root), "", "missing required key \"pools\" in configuration file (a file cut short while being written, or the wrong file?); to have no pools, write pools: {}")
	}
	// Images, then runners, whatever the file order, so runners can name
	// images by key and pools can name runners.
	p.images = p.imageEntries(images)
	cfg := &Config{Images: p.images, Runners: p.runners(runners)}
	cfg.Pools = p.pools(pools)
	return cfg
}

// Summary describes a pool in one line, for `bullpen validate`.
func Summary(p domain.Pool) string {
	var b strings.Builder
	env, tz := p.Environment, p.Timezone
	if env == "" {
		env = "any"
	}
	if tz == "" {
		tz = "UTC"
	}
	fmt.Fprintf(&b, "%s: runner %s, env %s, tz %s, %s, hot idle lifetime %s",
		p.Name, p.Runner, env, tz, scheduleSummary(p.Schedule), p.HotIdleLifetime)
	if p.Reuse {
		b.WriteString(", reuse")
		if p.MaxJobsPerInstance > 0 {
			fmt.Fprintf(&b, " up to %d jobs", p.MaxJobsPerInstance)
		}
		if p.MaxAge > 0 {
			fmt.Fprintf(&b, " for at most %s", p.MaxAge)
		}
	}
	if a := p.Autoscale; a != nil {
		fmt.Fprintf(&b, ", hot follows demand up to %d (poll %s, breach threshold %g)", a.Max, a.PollInterval, a.BreachThreshold)
	}
	return b.String()
}

func scheduleSummary(entries []domain.ScheduleEntry) string {
	if len(entries) == 0 {
		return "no schedule (target 0)"
	}
	s := fmt.Sprintf("%d schedule entries", len(entries))
	if len(entries) == 1 {
		s = "1 schedule entry"
	}
	for _, e := range entries {
		if e.Match == nil {
			return fmt.Sprintf("%s (default hot=%d stopped=%d)", s, e.Hot, e.Stopped)
		}
	}
	return s + " (no default: target 0 outside them)"
}
