package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestValueFindsTheSeriesHoldingEveryLabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a", "b"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "y", Help: "y"})
	reg.MustRegister(c, g)
	c.WithLabelValues("1", "2").Add(3)
	c.WithLabelValues("1", "9").Add(5)
	g.Set(7)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
		ok     bool
	}{
		{"x_total", []string{"a", "1", "b", "9"}, 5, true},
		{"x_total", []string{"b", "2"}, 3, true},
		{"x_total", []string{"a", "2"}, 0, false},
		{"y", nil, 7, true},
		{"z", nil, 0, false},
	} {
		if v, ok := Value(t, reg, tc.name, tc.labels...); v != tc.want || ok != tc.ok {
			t.Errorf("Value(%s, %q) = %v, %v; want %v, %v", tc.name, tc.labels, v, ok, tc.want, tc.ok)
		}
	}
}
