package intake

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	events       *prometheus.CounterVec
	deadLettered prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bullpen_intake_events_total",
			Help: "workflow_job deliveries processed, by action and outcome (pool, launch, rejected, not_ours, duplicate, recorded).",
		}, []string{"action", "outcome"}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_intake_dead_lettered_total", Help: "Inbox messages moved to the dead-letter queue after failing too often.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.events, m.deadLettered} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("intake metrics: %w", err)
		}
	}
	return m, nil
}
