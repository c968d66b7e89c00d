package converger

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
	"github.com/bullpen-ci/bullpen/internal/rebalance"
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
	kept           *keptGauge
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
		kept: &keptGauge{pools: map[string]bool{}, vec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bullpen_pool_kept_instances",
			Help: "Pool members beyond their role's target that the last cycle kept rather than terminated as excess, " +
				"because the conversion that would take them was held, by pool and reason: starts-held (the cloud lately " +
				"refused to start the pool's machines for want of capacity), converts-held (the pool's image did not resolve).",
		}, []string{"pool", "reason"})},
	}
	if err := promreg.Register(reg, "converger", m.cycles, m.cycleSeconds, m.actions, m.cloudErrors, m.conflicts,
		m.warmUpFailures, m.kept.vec); err != nil {
		return nil, err
	}
	return m, nil
}

// keptGauge is the gauge of the members each pool's plan keeps, by
// reason. It remembers the pools it has series of, so that a pool no
// longer configured loses them rather than showing its last count for ever.
type keptGauge struct {
	vec   *prometheus.GaugeVec
	mu    sync.Mutex
	pools map[string]bool
}

// set puts pool's series at what kept holds, every reason's (at zero when
// none is kept for it).
func (g *keptGauge) set(pool string, kept []rebalance.Kept) {
	n := map[rebalance.Reason]int{}
	for _, k := range kept {
		n[k.Reason] += len(k.Instances)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pools[pool] = true
	for _, why := range rebalance.KeptReasons {
		g.vec.WithLabelValues(pool, string(why)).Set(float64(n[why]))
	}
}

// forget deletes the series of the pools not configured.
func (g *keptGauge) forget(configured map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for pool := range g.pools {
		if !configured[pool] {
			g.vec.DeletePartialMatch(prometheus.Labels{"pool": pool})
			delete(g.pools, pool)
		}
	}
}
