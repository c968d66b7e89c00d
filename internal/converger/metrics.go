package converger

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
)

type metrics struct {
	cycles       prometheus.Counter
	cycleSeconds prometheus.Histogram
	actions      *prometheus.CounterVec
	cloudErrors  *prometheus.CounterVec
	conflicts    prometheus.Counter
	// warmUpFailures is by pool: a name from the configuration, never an
	// instance's id.
	warmUpFailures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		cycles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_converger_cycles_total", Help: "Pool convergence cycles run.",
		}),
		cycleSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bullpen_converger_cycle_seconds", Help: "Duration of one convergence cycle over every pool.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		actions: promreg.Counters("bullpen_pool_actions_total",
			"Instances the converger's plans acted on, by pool, action, reason and result: ok (done), "+
				"conflict (the instance changed since the plan, so was left alone), error (failed; retried later).",
			"pool", "action", "reason", "result"),
		cloudErrors: promreg.Counters("bullpen_converger_cloud_errors_total",
			"Failed cloud calls made by the converger, by operation.", "op"),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_converger_conflicts_total", Help: "Planned changes skipped because the instance changed meanwhile (claimed for a job, say).",
		}),
		warmUpFailures: promreg.Counters("bullpen_pool_warmup_failures_total",
			"New pool instances that failed before they warmed (their agent reported a failure while booting), by pool; "+
				"each one in a row backs the pool's creates off further.",
			"pool"),
	}
	if err := promreg.Register(reg, "converger", m.cycles, m.cycleSeconds, m.actions, m.cloudErrors, m.conflicts,
		m.warmUpFailures); err != nil {
		return nil, err
	}
	return m, nil
}
