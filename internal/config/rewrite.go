package config

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// WithSchedules returns the configuration file data with the schedules of
// the pools named in schedules replaced, in UTC (their `timezone:` goes),
// and everything else kept, comments included. The result is checked by
// Parse before it is returned.
func WithSchedules(filename string, data []byte, schedules map[string][]domain.ScheduleEntry) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: not a mapping of runners and pools", filename)
	}
	pools := valueOf(doc.Content[0], "pools")
	if pools == nil || pools.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: no pools", filename)
	}
	for name, entries := range schedules {
		pool := valueOf(pools, name)
		if pool == nil || pool.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: no pool %q", filename, name)
		}
		removeKey(pool, "timezone")
		removeKey(pool, "schedule")
		pool.Content = append(pool.Content, scalar("schedule"), scheduleNode(entries))
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	if _, err := Parse(filename, out.Bytes()); err != nil {
		return nil, fmt.Errorf("the rewritten configuration does not parse: %w", err)
	}
	return out.Bytes(), nil
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
