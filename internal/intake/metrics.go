package intake

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
)

type metrics struct {
	events       *prometheus.CounterVec
	deadLettered prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events: promreg.Counters("bullpen_intake_events_total",
			"workflow_job deliveries processed, by action and outcome (pool, launch, rejected, rejected_again: a readmitted job the configuration still refuses, not_ours, duplicate, recorded, send_pending: a dead-lettered arrival's job left to the reaper to send).", "action", "outcome"),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_intake_dead_lettered_total", Help: "Inbox messages moved to the dead-letter queue after failing too often.",
		}),
	}
	if err := promreg.Register(reg, "intake", m.events, m.deadLettered); err != nil {
		return nil, err
	}
	// Rejections at zero from the start: an alert on their increase
	// (BullpenJobsRejected) sees the first one.
	m.events.WithLabelValues("queued", "rejected")
	return m, nil
}
