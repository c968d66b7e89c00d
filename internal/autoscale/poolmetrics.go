package autoscale

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// PoolMetrics counts what a PoolScaler decides and shows what it decided
// from. Labels are the pool's configured name, the decision's action and a
// breach's direction, never an id.
type PoolMetrics struct {
	decisions *prometheus.CounterVec // pool, action: up, down, none
	skipped   *prometheus.CounterVec // pool: polls without a demand
	demand    *prometheus.GaugeVec   // pool: the demand of the last poll
	score     *prometheus.GaugeVec   // pool, direction: up, down
}

// NewPoolMetrics builds the scaler's metrics and registers them with reg
// (none with a nil reg).
func NewPoolMetrics(reg prometheus.Registerer) (*PoolMetrics, error) {
	m := &PoolMetrics{
		decisions: promreg.Counters("bullpen_autoscale_decisions_total",
			"Decisions of the demand autoscaler of pools with an autoscale block, by pool and action (up, down, none).",
			"pool", "action"),
		skipped: promreg.Counters("bullpen_autoscale_skipped_polls_total",
			"Polls of a pool's demand autoscaler that kept the count because the demand could not be read.", "pool"),
		demand: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bullpen_autoscale_demand",
			Help: "Jobs routed to a pool with an autoscale block that were queued or in progress at its autoscaler's last poll that read them."},
			[]string{"pool"}),
		score: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bullpen_autoscale_breach_score",
			Help: "Decayed breach score of a pool's demand autoscaler at its last poll, by direction (up, down); " +
				"that direction scales when it reaches the block's breach threshold and its cooldown is over."},
			[]string{"pool", "direction"}),
	}
	return m, promreg.Register(reg, "pool autoscaler", m.decisions, m.skipped, m.demand, m.score)
}

// decided counts d, a decision on demand, and shows the breach scores it
// left, up and down.
func (m *PoolMetrics) decided(pool string, d Decision, demand int, up, down float64) {
	if m != nil {
		m.series(pool)
		m.decisions.WithLabelValues(pool, d.Action).Inc()
		m.demand.WithLabelValues(pool).Set(float64(demand))
		m.score.WithLabelValues(pool, ActionUp).Set(up)
		m.score.WithLabelValues(pool, ActionDown).Set(down)
	}
}

func (m *PoolMetrics) skippedPoll(pool string) {
	if m != nil {
		m.series(pool)
		m.skipped.WithLabelValues(pool).Inc()
	}
}

// series makes every counter of pool at zero with its first poll, so that a
// rate over them reads 0 rather than "no data". The gauges wait for a
// demand read: a demand of 0 that was never read would be a lie.
func (m *PoolMetrics) series(pool string) {
	for _, a := range []string{ActionUp, ActionDown, ActionNone} {
		m.decisions.WithLabelValues(pool, a)
	}
	m.skipped.WithLabelValues(pool)
}

// forget drops every series of pool: a pool removed from the configuration,
// or whose block was, would otherwise show its last demand and scores for
// as long as the process runs.
func (m *PoolMetrics) forget(pool string) {
	if m != nil {
		of := prometheus.Labels{"pool": pool}
		m.decisions.DeletePartialMatch(of)
		m.skipped.DeletePartialMatch(of)
		m.demand.DeletePartialMatch(of)
		m.score.DeletePartialMatch(of)
	}
}
