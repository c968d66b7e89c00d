package labels

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// rule is how one known key reads its value.
type rule struct {
	want string // what a value looks like, for messages
	// apply stores the value in the request, or returns the problem with
	// it. Nil for keys accepted but not acted on.
	apply func(r *Request, value string) (problem string)
	// machine marks keys that choose or shape the machine: a pool's runner
	// decides those instead.
	machine bool
}

var rules = map[string]rule{
	runsOnKey: {want: "the workflow run id, a positive integer", apply: func(r *Request, v string) string {
		id, ok := positive(v, 1<<62)
		if !ok {
			return fmt.Sprintf("%s is not a run id (a positive integer)", domain.QuoteShort(v))
		}
		r.RunID = int64(id)
		return ""
	}},
	"pool":   {want: "a pool name", apply: nameInto(func(r *Request) *string { return &r.Pool })},
	"runner": {want: "a runner name", machine: true, apply: nameInto(func(r *Request) *string { return &r.Runner })},
	"env":    {want: "an environment name", apply: nameInto(func(r *Request) *string { return &r.Env })},
	"region": {want: "a region such as us-east-1", apply: nameInto(func(r *Request) *string { return &r.Region })},
	"image":  {want: "an image name", machine: true, apply: nameInto(func(r *Request) *string { return &r.Spec.Image })},
	"cpu": {want: "a vCPU count such as 4, or a range such as 2+8", machine: true, apply: func(r *Request, v string) string {
		var problem string
		r.Spec.CPU, problem = sizeRange(v)
		return problem
	}},
	"ram": {want: "GiB of memory such as 16, or a range such as 8+32", machine: true, apply: func(r *Request, v string) string {
		var problem string
		r.Spec.RAM, problem = sizeRange(v)
		return problem
	}},
	"family": {want: "instance families such as c7a+m7a", machine: true, apply: func(r *Request, v string) string {
		var problem string
		r.Spec.Family, problem = family(v)
		return problem
	}},
	"spot": {want: "true, false, pco, price-capacity-optimized, lowest-price or capacity-optimized", machine: true,
		apply: func(r *Request, v string) string {
			strategy, problem := spot(v)
			if problem == "" {
				r.Spec.Spot = &strategy
			}
			return problem
		}},
	"volume": {want: domain.VolumeForm, machine: true, apply: func(r *Request, v string) string {
		vol, problems := domain.ParseVolume(v)
		if problems != nil {
			return problems[0] // the label's text already shows v
		}
		r.Spec.Volume = vol
		return ""
	}},
	// RunsOn settings bullpen accepts so that existing workflows keep
	// working, and does not act on.
	"disk": {want: "a disk setting"}, "ssh": {want: "true or false"}, "private": {want: "true or false"},
	"extras": {want: "extras such as s3-cache"}, "retry": {want: "a retry policy"},
	"tag": {want: "a tag"}, "tags": {want: "tags"},
}

var knownKeys = slices.Sorted(maps.Keys(rules))

// maxSize bounds cpu and ram values, so that nothing downstream overflows.
const maxSize = 1 << 20

// nameInto stores a name (pool, runner, environment, …) in the field that
// field returns.
func nameInto(field func(*Request) *string) func(*Request, string) string {
	return func(r *Request, v string) string {
		if strings.IndexFunc(v, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) >= 0 {
			return fmt.Sprintf("%s is not a name (names have no spaces or control characters)", domain.QuoteShort(v))
		}
		*field(r) = v
		return ""
	}
}

// positive parses decimal digits (no sign) as a number from 1 to limit.
func positive(s string, limit uint64) (uint64, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	x, err := strconv.ParseUint(s, 10, 64)
	return x, err == nil && x >= 1 && x <= limit
}

// sizeRange reads "4" (exactly 4) or "2+8" (2 to 8); like the
// configuration's lists, several items span the smallest to the largest.
func sizeRange(v string) (domain.Range, string) {
	var r domain.Range
	for item := range strings.SplitSeq(v, "+") {
		item = strings.TrimSpace(item)
		if item == "" {
			return domain.Range{}, fmt.Sprintf("empty item in %s", domain.QuoteShort(v))
		}
		if strings.TrimLeft(item, "0123456789") != "" {
			return domain.Range{}, fmt.Sprintf("%s is not a number", domain.QuoteShort(item))
		}
		x, ok := positive(item, maxSize)
		if !ok {
			return domain.Range{}, fmt.Sprintf("%s is out of range (1 to %d)", domain.QuoteShort(item), maxSize)
		}
		if r.Min == 0 || int(x) < r.Min {
			r.Min = int(x)
		}
		r.Max = max(r.Max, int(x))
	}
	return r, ""
}

// family reads "c7a+m7a" as a list, dropping repeats and keeping the order
// written.
func family(v string) ([]string, string) {
	var out []string
	for item := range strings.SplitSeq(v, "+") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Sprintf("empty item in %s", domain.QuoteShort(v))
		}
		if strings.IndexFunc(item, unicode.IsSpace) >= 0 {
			return nil, fmt.Sprintf("%s is not an instance family", domain.QuoteShort(item))
		}
		if !slices.Contains(out, item) {
			out = append(out, item)
		}
	}
	return out, ""
}

// Spot allocation strategies, as EC2 fleets name them; the first is what
// spot=true and spot=pco mean.
var spotStrategies = []string{"price-capacity-optimized", "lowest-price", "capacity-optimized"}

// spot reads spot=false (on-demand, ""), spot=true or a strategy name.
func spot(v string) (string, string) {
	switch s := strings.ToLower(v); {
	case s == "false":
		return "", ""
	case s == "true" || s == "pco":
		return spotStrategies[0], ""
	case slices.Contains(spotStrategies, s):
		return s, ""
	}
	return "", fmt.Sprintf("%s is not a spot setting (expected true, false, pco, %s)", domain.QuoteShort(v), strings.Join(spotStrategies, ", "))
}
