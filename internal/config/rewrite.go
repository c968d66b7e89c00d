package config

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// WithSchedules returns the configuration file data with the schedules of
// the pools named in schedules replaced, in UTC (their `timezone:` goes),
// and everything else kept, comments included. A pool that merges settings
// (<<) gets an explicit `timezone: UTC`, which wins over a merged one. The
// result is parsed and checked before it is returned: each planned pool
// must read back with its planned schedule in UTC, and every other pool as
// it was. A pool the rewrite cannot change alone (an alias of another, or
// one whose mapping others merge) is refused, named.
func WithSchedules(filename string, data []byte, schedules map[string][]domain.ScheduleEntry) ([]byte, error) {
	before, err := Parse(filename, data)
	if err != nil {
		return nil, fmt.Errorf("the configuration does not parse: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || deref(doc.Content[0]).Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: not a mapping of runners and pools", filename)
	}
	pools := deref(valueOf(deref(doc.Content[0]), "pools"))
	if pools == nil || pools.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: no pools", filename)
	}
	names := slices.Sorted(maps.Keys(schedules))
	for _, name := range names {
		pool := deref(valueOf(pools, name))
		if pool == nil || pool.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: no pool %q", filename, name)
		}
		removeKey(pool, "timezone")
		removeKey(pool, "schedule")
		if hasMerge(pool) {
			pool.Content = append(pool.Content, scalar("timezone"), scalar("UTC"))
		}
		pool.Content = append(pool.Content, scalar("schedule"), scheduleNode(schedules[name]))
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	after, err := Parse(filename, out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("the rewritten configuration does not parse: %w", err)
	}
	if err := sameButSchedules(filename, before, after, schedules); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// sameButSchedules checks a rewrite: the planned pools have their planned
// schedules in UTC, and nothing else changed.
func sameButSchedules(filename string, before, after *Config, schedules map[string][]domain.ScheduleEntry) error {
	const shared = "pools share settings through an anchor (&) and an alias (*) or merge (<<), which the rewrite cannot change for one pool alone; write out the timezone and schedule of each pool involved (an aliased pool in full) and run again"
	planned := slices.Sorted(maps.Keys(schedules))
	for _, name := range planned {
		p, ok := after.Pool(name)
		if !ok || p.Timezone != "UTC" && p.Timezone != "" || !sameSchedule(p.Schedule, schedules[name]) {
			return fmt.Errorf("%s: pool %q does not read back with its planned schedule in UTC once rewritten: %s", filename, name, shared)
		}
	}
	for _, b := range before.Pools {
		a, ok := after.Pool(b.Name)
		if _, isPlanned := schedules[b.Name]; isPlanned && ok {
			a.Schedule, a.Timezone, a.Location = b.Schedule, b.Timezone, b.Location
		}
		if !ok || !samePool(a, b) {
			return fmt.Errorf("%s: pool %q would change with the rewrite of %s: %s", filename, b.Name, strings.Join(quoteAll(planned), ", "), shared)
		}
	}
	if len(after.Pools) != len(before.Pools) || !reflect.DeepEqual(after.Runners, before.Runners) {
		return fmt.Errorf("%s: the rewrite of %s changes more than their schedules", filename, strings.Join(quoteAll(planned), ", "))
	}
	return nil
}

func samePool(a, b domain.Pool) bool {
	return sameSchedule(a.Schedule, b.Schedule) && reflect.DeepEqual(settings(a), settings(b))
}

// settings is a pool without its schedule, compared apart, and its
// location, which each parse loads anew: Timezone names it.
func settings(p domain.Pool) domain.Pool {
	p.Schedule, p.Location = nil, nil
	return p
}

// sameSchedule compares schedules as they resolve: names, counts, days
// (an empty list and none alike) and windows.
func sameSchedule(a, b []domain.ScheduleEntry) bool {
	return slices.EqualFunc(a, b, func(x, y domain.ScheduleEntry) bool {
		if x.Name != y.Name || x.Hot != y.Hot || x.Stopped != y.Stopped || (x.Match == nil) != (y.Match == nil) {
			return false
		}
		if x.Match == nil {
			return true
		}
		if !slices.Equal(x.Match.Days, y.Match.Days) || (x.Match.Window == nil) != (y.Match.Window == nil) {
			return false
		}
		return x.Match.Window == nil || *x.Match.Window == *y.Match.Window
	})
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strconv.Quote(n)
	}
	return out
}

func hasMerge(mapping *yaml.Node) bool {
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if isMerge(deref(mapping.Content[i])) {
			return true
		}
	}
	return false
}

func valueOf(mapping *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if mapping.Content[i].Value == key {
			return mapping.Content[i+1]
		}
	}
	return nil
}

func removeKey(mapping *yaml.Node, key string) {
	for i := 0; i+1 < len(mapping.Content); i += 2 {
		if mapping.Content[i].Value == key {
			mapping.Content = append(mapping.Content[:i], mapping.Content[i+2:]...)
			return
		}
	}
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

func quoted(v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Value: v, Style: yaml.DoubleQuotedStyle}
}

func scheduleNode(entries []domain.ScheduleEntry) *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, e := range entries {
		m := &yaml.Node{Kind: yaml.MappingNode}
		m.Content = append(m.Content, scalar("name"), scalar(e.Name))
		if e.Match != nil {
			match := &yaml.Node{Kind: yaml.MappingNode}
			if len(e.Match.Days) > 0 {
				days := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
				for _, d := range e.Match.Days {
					days.Content = append(days.Content, scalar(strings.ToLower(d.String())))
				}
				match.Content = append(match.Content, scalar("day"), days)
			}
			if w := e.Match.Window; w != nil {
				window := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
				window.Content = append(window.Content, quoted(clock(w.Start)), quoted(clock(w.End)))
				match.Content = append(match.Content, scalar("time"), window)
			}
			m.Content = append(m.Content, scalar("match"), match)
		}
		m.Content = append(m.Content, scalar("hot"), scalar(strconv.Itoa(e.Hot)), scalar("stopped"), scalar(strconv.Itoa(e.Stopped)))
		seq.Content = append(seq.Content, m)
	}
	return seq
}

// clock writes minutes after midnight as the configuration's "HH:MM".
func clock(minutes int) string {
	return fmt.Sprintf("%02d:%02d", minutes/60, minutes%60)
}
