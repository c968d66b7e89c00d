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
		signals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bullpen_agent_signals_total", Help: "Signals received from instance agents, by kind.",
		}, []string{"kind"}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_agent_heartbeats_total", Help: "Heartbeats received from instance agents.",
		}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bullpen_releases_total", Help: "Instances after their job, by outcome (releasing, pooled, terminated, timed_out).",
		}, []string{"outcome"}),
		interruptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bullpen_spot_interruptions_total",
			Help: "Instances taken out of service by a spot interruption notice, by what became of their job (none, requeued, started).",
		}, []string{"job"}),
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
