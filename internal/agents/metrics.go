package agents

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
)

type metrics struct {
	signals    *prometheus.CounterVec
	heartbeats prometheus.Counter
	releases   *prometheus.CounterVec
	// interruptions counts machines the cloud took back, by what became
	// of their job.
	interruptions *prometheus.CounterVec
	// instancesFailed counts instances a failure took out of service, once
	// each: not the failed signals, which include repeats and refusals.
	instancesFailed prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		signals: promreg.Counters("bullpen_agent_signals_total",
			"Signals received from instance agents, by kind.", "kind"),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_agent_heartbeats_total", Help: "Heartbeats received from instance agents.",
		}),
		releases: promreg.Counters("bullpen_releases_total",
			"Instances after their job, by outcome (releasing, pooled, terminated, timed_out).", "outcome"),
		interruptions: promreg.Counters("bullpen_spot_interruptions_total",
			"Instances taken out of service by a spot interruption notice, by what became of their job (none, requeued, started).", "job"),
		instancesFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_instances_failed_total",
			Help: "Instances taken out of service because their agent reported a failure or their runner ended before its job started; each once.",
		}),
	}
	if err := promreg.Register(reg, "agent", m.signals, m.heartbeats, m.releases, m.interruptions, m.instancesFailed); err != nil {
		return nil, err
	}
	return m, nil
}
