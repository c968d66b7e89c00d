package dispatch

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
)

type metrics struct {
	jobs         *prometheus.CounterVec
	batchSize    prometheus.Histogram
	batchSeconds prometheus.Histogram
	conflicts    prometheus.Counter
	detached     prometheus.Counter
	started      prometheus.Counter
	cloudErrors  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		jobs: promreg.Counters("bullpen_pool_dispatch_jobs_total",
			"Pool-queue jobs by outcome (assigned, overflow, skipped, retried; overflow_no_capacity: moved to the launch queue because the cloud had no capacity to start its stopped instance; overflow_failed: its move to the launch queue was not recorded, so its pool message comes back).", "outcome"),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bullpen_pool_dispatch_batch_size", Help: "Jobs received per pool dispatch cycle.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bullpen_pool_dispatch_batch_seconds", Help: "Time to serve one pool batch.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_pool_dispatch_claim_conflicts_total", Help: "Claims lost to another claimer; the job tried the next instance.",
		}),
		detached: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_pool_instances_detached_total", Help: "Pool instances detached for a job.",
		}),
		started: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_pool_instances_started_total", Help: "Stopped pool instances started for a job.",
		}),
		cloudErrors: promreg.Counters("bullpen_pool_dispatch_cloud_errors_total",
			"Failed cloud calls of the pool dispatcher, by operation.", "op"),
	}
	if err := promreg.Register(reg, "dispatch", m.jobs, m.batchSize, m.batchSeconds, m.conflicts, m.detached, m.started, m.cloudErrors); err != nil {
		return nil, err
	}
	return m, nil
}
