package bench

import "github.com/prometheus/client_golang/prometheus"

// sharedStateCounts reads bullpen_aws_calls_total by "service:operation" and
// bullpen_store_refused_writes_total by "row:remembered", each under its
// family's name.
func sharedStateCounts(g prometheus.Gatherer) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	families, err := g.Gather()
	if err != nil {
		return out
	}
	keys := map[string][2]string{
		"bullpen_aws_calls_total":            {"service", "operation"},
		"bullpen_store_refused_writes_total": {"row", "remembered"},
	}
	for _, f := range families {
		names, ok := keys[f.GetName()]
		if !ok {
			continue
		}
		series := map[string]float64{}
		for _, m := range f.GetMetric() {
			var first, second string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case names[0]:
					first = l.GetValue()
				case names[1]:
					second = l.GetValue()
				}
			}
			series[first+":"+second] += m.GetCounter().GetValue()
		}
		out[f.GetName()] = series
	}
	return out
}

// perJob is each series of family that grew from before to after, divided
// by n; nil when none grew.
func perJob(before, after map[string]map[string]float64, family string, n int) map[string]float64 {
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
