package bench

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Counters a burst's figures come from, each with the labels its series are
// keyed by, in that order ("service:operation", "row:remembered").
const (
	startedTotal  = "bullpen_pool_instances_started_total"
	detachedTotal = "bullpen_pool_instances_detached_total"
	awsCallsTotal = "bullpen_aws_calls_total"
	refusedTotal  = "bullpen_store_refused_writes_total"
)

var countedLabels = map[string][]string{
	startedTotal:  nil,
	detachedTotal: nil,
	awsCallsTotal: {"service", "operation"},
	refusedTotal:  {"row", "remembered"},
}

// counts are the counters of countedLabels, by family, then by the series'
// label values joined with ":".
type counts map[string]map[string]float64

// gatherCounts reads the counters of countedLabels from g, in one gathering.
func gatherCounts(g prometheus.Gatherer) counts {
	out := counts{}
	families, err := g.Gather()
	if err != nil {
		return out
	}
	for _, f := range families {
		names, ok := countedLabels[f.GetName()]
		if !ok {
			continue
		}
		series := map[string]float64{}
		for _, m := range f.GetMetric() {
			values := make([]string, len(names))
			for _, l := range m.GetLabel() {
				for k, name := range names {
					if l.GetName() == name {
						values[k] = l.GetValue()
					}
				}
			}
			series[strings.Join(values, ":")] += m.GetCounter().GetValue()
		}
		out[f.GetName()] = series
	}
	return out
}

// grew is how much family's series summed grew from c to after.
func (c counts) grew(after counts, family string) float64 {
	total := 0.0
	for k, v := range after[family] {
		total += v - c[family][k]
	}
	return total
}

// perJob is each series of family that grew from before to after, divided
// by n; nil when none grew.
func perJob(before, after counts, family string, n int) map[string]float64 {
	var out map[string]float64
	for k, c := range after[family] {
		if d := c - before[family][k]; d > 0 {
			if out == nil {
				out = map[string]float64{}
			}
			out[k] = d / float64(n)
		}
	}
	return out
}
