package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/demo"
)

// Timings are how long the simulated cloud's machines take to change
// state: a default, and overrides for the instance types of a family.
type Timings struct {
	Default  sim.Latency
	Families map[string]sim.Latency
}

// DefaultTimings are the demo's: boot 15 s, warm-up 30 s, start 10 s,
// stop 10 s, terminate 5 s, for every family.
func DefaultTimings() Timings { return Timings{Default: demo.DefaultLatency} }

// timingNames are a timings file's keys, each with the field it sets.
var timingNames = map[string]func(*sim.Latency) *time.Duration{
	"boot":      func(l *sim.Latency) *time.Duration { return &l.Boot },
	"warm_up":   func(l *sim.Latency) *time.Duration { return &l.WarmUp },
	"start":     func(l *sim.Latency) *time.Duration { return &l.Start },
	"stop":      func(l *sim.Latency) *time.Duration { return &l.Stop },
	"terminate": func(l *sim.Latency) *time.Duration { return &l.Terminate },
}

// ParseTimings reads a timings file:
//
//	{"default": {"boot": "15s", "warm_up": "30s"},
//	 "families": {"m7i": {"boot": "40s"}, "mac2": {"boot": "6m", "start": "4m"}}}
//
// Each entry sets only the timings it names: the default's are laid over
// DefaultTimings, a family's over the default. Errors name the file and
// the entry.
func ParseTimings(filename string, data []byte) (Timings, error) {
	var f struct {
		Default  map[string]string            `json:"default"`
		Families map[string]map[string]string `json:"families"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Timings{}, fmt.Errorf("%s: %w (want {\"default\": {...}, \"families\": {\"FAMILY\": {...}}})", filename, err)
	}
	t := DefaultTimings()
	if err := lay(&t.Default, f.Default); err != nil {
		return Timings{}, fmt.Errorf("%s: default: %w", filename, err)
	}
	for family, set := range f.Families {
		if family == "" || strings.Contains(family, ".") {
			return Timings{}, fmt.Errorf("%s: families: %q is not a family (the part of an instance type before the dot: m7a)", filename, family)
		}
		l := t.Default
		if err := lay(&l, set); err != nil {
			return Timings{}, fmt.Errorf("%s: families.%s: %w", filename, family, err)
		}
		if t.Families == nil {
			t.Families = map[string]sim.Latency{}
		}
		t.Families[family] = l
	}
	return t, nil
}

// lay sets l's timings that set names.
func lay(l *sim.Latency, set map[string]string) error {
	for name, v := range set {
		field, ok := timingNames[name]
		if !ok {
			known := make([]string, 0, len(timingNames))
			for k := range timingNames {
				known = append(known, k)
			}
			slices.Sort(known)
			return fmt.Errorf("unknown timing %q (known: %s)", name, strings.Join(known, ", "))
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("%s: %q is not a duration >= 0 (15s, 2m)", name, v)
		}
		*field(l) = d
	}
	return nil
}
