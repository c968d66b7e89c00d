// Package promreg registers a component's Prometheus collectors, the one way
// every package that exports metrics does it.
package promreg

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers each collector with reg, in order, and stops at the
// first that fails; what names the collectors' owner in the error. A nil
// reg (the interface, not a nil *prometheus.Registry in it) registers
// nothing: components are built without metrics in tests and simulations,
// and their collectors still count.
func Register(reg prometheus.Registerer, what string, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%s metrics: %w", what, err)
		}
	}
	return nil
}

// Counters is a counter family of name and help, by labels.
func Counters(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// AtZero makes the series of v's one label for each of values, at zero,
// so that a dashboard shows none rather than no data and an alert on an
// increase sees the first one.
func AtZero(v *prometheus.CounterVec, values ...string) {
	for _, value := range values {
		v.WithLabelValues(value)
	}
}
