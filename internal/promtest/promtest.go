// Package promtest reads the metrics a test's code registered, as a scrape
// of its registry would see them.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Value is the value of metric name's series whose labels hold every pair
// of labels (name, value, name, value, …), a counter's or a gauge's; ok is
// false when no series matches. A registry that cannot be gathered fails
// the test.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (v float64, ok bool) {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("promtest.Value(%s): labels come in name, value pairs: %q", name, labels)
	}
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			if !holds(have, labels) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func holds(have map[string]string, pairs []string) bool {
	for i := 0; i < len(pairs); i += 2 {
		if have[pairs[i]] != pairs[i+1] {
			return false
		}
	}
	return true
}

// MustValue is Value for a series that must exist: none fails the test.
func MustValue(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, ok := Value(t, g, name, labels...)
	if !ok {
		t.Fatalf("no series %s%q", name, labels)
	}
	return v
}
