// Package labels reads the labels of a GitHub workflow job (its `runs-on:`
// values) the way RunsOn writes them: whether the job is bullpen's, which
// pool or runner it asks for, and what machine it wants when it has to be
// started cold.
//
// A job is bullpen's when one of its labels opens with `runs-on` (bare, or
// `runs-on=<run_id>` to pin the runner to one workflow run), or when it
// carries the bare `dependabot` label and a pool named `dependabot` exists.
// Within a label, `key=value` pairs are separated by `/` or `,`; a value
// that is a list joins its items with `+`. Pairs may also sit in the job's
// other labels (a separate `env=dev`); bare labels such as `self-hosted` are
// someone else's and left alone.
package labels

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// DependabotPool is the pool a bare `dependabot` label expands to.
const DependabotPool = "dependabot"

const runsOnKey = "runs-on"

// Request is what a job's labels ask of bullpen.
type Request struct {
	// Ours is set when a label opens with runs-on, or the job is a
	// dependabot job and the dependabot pool exists.
	Ours bool
	// RunID is the workflow run the job pins its runner to (runs-on=ID);
	// 0 when the labels do not pin one.
	RunID  int64
	Pool   string // pool=, or DependabotPool
	Runner string // runner=: a configured runner; "" when Pool is set
	Env    string
	Region string
	// Spec is what the labels ask of the machine, applied over a runner
	// spec by ColdSpec. Empty when Pool is set: the pool's runner decides.
	Spec SpecOverrides
	// Ignored lists, sorted, the keys the labels gave that bullpen accepts
	// but does not act on: RunsOn-only settings, and runner and machine
	// keys that a pool= overrides.
	Ignored []string
}

// SpecOverrides are the machine settings a job's labels ask for; a zero
// field leaves the base runner's setting as it is.
type SpecOverrides struct {
	CPU    domain.Range // cpu=4, or cpu=2+8 for 2 to 8 vCPUs
	RAM    domain.Range // ram=16, or ram=8+32 (GiB)
	Family []string     // family=c7a+m7a
	Image  string       // image=ubuntu24-full-x64
	// Spot is nil when the labels say nothing; "" asks for on-demand,
	// otherwise it names the spot allocation strategy.
	Spot   *string
	Volume domain.Volume // volume=gp3:30gb:125mbps:3000iops
}

// ErrUnknownPool is wrapped by the Error for a pool= naming a pool that the
// environment does not have: such a job is rejected, never left waiting.
var ErrUnknownPool = errors.New("unknown pool")

// Error is a problem with one label of a job that is bullpen's.
type Error struct {
	Label   string // the label as written
	Key     string // the known key at fault; "" for an unknown key or a malformed label
	Problem string
	Err     error // ErrUnknownPool, or nil
}

func (e *Error) Error() string {
	msg := "label " + domain.QuoteShort(e.Label) + ": "
	if e.Key != "" {
		msg += e.Key + ": "
	}
	return msg + e.Problem
}

func (e *Error) Unwrap() error { return e.Err }

// Parse reads a job's labels. poolExists says whether this environment has
// a pool of that name; nil means it has none. A job that is not bullpen's
// gives Ours=false and no error, whatever its labels hold. For a job that
// is, an error (an *Error) says why it cannot be served: a malformed or
// unknown key, two values for one key, or a pool= naming a pool that does
// not exist (errors.Is(err, ErrUnknownPool)). Keys that a pool= makes
// ignored must still be well formed: a typo is reported, not ignored. The
// Request returned with an error has Ours set and holds what was read before
// the problem.
func Parse(labels []string, poolExists func(name string) bool) (Request, error) {
	if poolExists == nil {
		poolExists = func(string) bool { return false }
	}
	dependabot := slices.ContainsFunc(labels, isDependabot) && poolExists(DependabotPool)
	if !dependabot && !slices.ContainsFunc(labels, opensWithRunsOn) {
		return Request{}, nil
	}
	p := parser{req: Request{Ours: true}, seen: make(map[string]given)}
	for _, label := range labels {
		var err error
		switch {
		case opensWithRunsOn(label) || strings.Contains(label, "="):
			err = p.pairs(label)
		case dependabot && isDependabot(label):
			err = p.set(label, "pool", DependabotPool)
		}
		if err != nil {
			return p.req, err
		}
	}
	return p.finish(poolExists)
}

// given is a key's value and the label it came from.
type given struct {
	value, label string
}

type parser struct {
	req  Request
	seen map[string]given
}

// pairs reads one label of key=value pairs.
func (p *parser) pairs(label string) error {
	if !utf8.ValidString(label) {
		return fail(label, "", "not valid UTF-8")
	}
	for i, pair := range splitPairs(label) {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			return fail(label, "", `empty pair (a stray "/" or ","?)`)
		}
		key, value, hasValue := strings.Cut(pair, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		switch {
		case key == runsOnKey && i > 0:
			return fail(label, runsOnKey, "must open its label, as in runs-on=RUN_ID/pool=NAME")
		case key == runsOnKey && !hasValue:
			continue // the bare marker: ours, not pinned to a run
		case !hasValue:
			return fail(label, "", fmt.Sprintf("expected key=value, got %s", domain.QuoteShort(pair)))
		}
		if err := p.set(label, key, strings.TrimSpace(value)); err != nil {
			return err
		}
	}
	return nil
}

// set records key=value from label.
func (p *parser) set(label, key, value string) error {
	rule, ok := rules[key]
	if !ok {
		return fail(label, "", fmt.Sprintf("unknown key %s (known keys: %s)", domain.QuoteShort(key), strings.Join(knownKeys, ", ")))
	}
	if value == "" {
		return fail(label, key, "empty value (expected "+rule.want+")")
	}
	if prev, dup := p.seen[key]; dup {
		if prev.value == value {
			return nil
		}
		return fail(label, key, fmt.Sprintf("%s conflicts with %s given in label %s",
			domain.QuoteShort(value), domain.QuoteShort(prev.value), domain.QuoteShort(prev.label)))
	}
	p.seen[key] = given{value: value, label: label}
	if rule.apply == nil {
		return nil
	}
	if problem := rule.apply(&p.req, value); problem != "" {
		return fail(label, key, problem)
	}
	return nil
}

// finish checks the pool and settles which keys are ignored.
func (p *parser) finish(poolExists func(string) bool) (Request, error) {
	ignored := func(key string) bool { return rules[key].apply == nil }
	if p.req.Pool != "" {
		if !poolExists(p.req.Pool) {
			return p.req, &Error{Label: p.seen["pool"].label, Key: "pool", Err: ErrUnknownPool,
				Problem: fmt.Sprintf("pool %s does not exist in this environment", domain.QuoteShort(p.req.Pool))}
		}
		// The seed: with pool=, only env and region still count; the
		// pool's runner spec decides the machine.
		p.req.Runner, p.req.Spec = "", SpecOverrides{}
		ignored = func(key string) bool { return rules[key].apply == nil || rules[key].machine }
	}
	for key := range p.seen {
		if ignored(key) {
			p.req.Ignored = append(p.req.Ignored, key)
		}
	}
	slices.Sort(p.req.Ignored)
	return p.req, nil
}

func fail(label, key, problem string) error {
	return &Error{Label: label, Key: key, Problem: problem}
}

// opensWithRunsOn reports whether the label's first pair has the key
// runs-on: "runs-on", "runs-on=123", "runs-on/pool=x", "runs-on,cpu=4".
func opensWithRunsOn(label string) bool {
	first := label
	if i := strings.IndexAny(label, "/,"); i >= 0 {
		first = label[:i]
	}
	key, _, _ := strings.Cut(first, "=")
	return strings.EqualFold(strings.TrimSpace(key), runsOnKey)
}

func isDependabot(label string) bool {
	return strings.EqualFold(strings.TrimSpace(label), "dependabot")
}

// splitPairs splits a label at every "/" and ",", keeping empty pieces so
// that stray separators can be reported.
func splitPairs(label string) []string {
	var out []string
	for {
		i := strings.IndexAny(label, "/,")
		if i < 0 {
			return append(out, label)
		}
		out = append(out, label[:i])
		label = label[i+1:]
	}
}
