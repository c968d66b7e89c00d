package autoscale

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// PoolMetrics counts what a PoolScaler decides. Labels are the pool's
// configured name and the decision's action, never an id.
type PoolMetrics struct {
	decisions *prometheus.CounterVec // pool, action: up, down, none
	skipped   *prometheus.CounterVec // pool: polls without a demand
}

// NewPoolMetrics builds the scaler's counters and registers them with reg
// (none with a nil reg).
func NewPoolMetrics(reg prometheus.Registerer) (*PoolMetrics, error) {
	m := &PoolMetrics{
		decisions: promreg.Counters("bullpen_autoscale_decisions_total",
			"Decisions of the demand autoscaler of pools with an autoscale block, by pool and action (up, down, none).",
			"pool", "action"),
		skipped: promreg.Counters("bullpen_autoscale_skipped_polls_total",
			"Polls of a pool's demand autoscaler that kept the count because the demand could not be read.", "pool"),
	}
	return m, promreg.Register(reg, "pool autoscaler", m.decisions, m.skipped)
}

func (m *PoolMetrics) decided(pool, action string) {
	if m != nil {
		m.series(pool)
		m.decisions.WithLabelValues(pool, action).Inc()
	}
}

func (m *PoolMetrics) skippedPoll(pool string) {
	if m != nil {
		m.series(pool)
		m.skipped.WithLabelValues(pool).Inc()
	}
}

// series makes every series of pool at zero with its first poll, so that a
// rate over them reads 0 rather than "no data".
func (m *PoolMetrics) series(pool string) {
	for _, a := range []string{ActionUp, ActionDown, ActionNone} {
		m.decisions.WithLabelValues(pool, a)
	}
	m.skipped.WithLabelValues(pool)
}
