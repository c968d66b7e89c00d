package appplatform

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// API names used as metric labels and in logs.
const (
	apiGitHub = "github"
	apiDO     = "digitalocean"
)

// metrics of the standalone autoscaler. Labels are bounded: statuses,
// actions, API names, error kinds, never ids.
type metrics struct {
	demand    *prometheus.GaugeVec   // status: queued, in_progress
	instances prometheus.Gauge       // the worker's instance_count
	score     *prometheus.GaugeVec   // direction: up, down
	decisions *prometheus.CounterVec // action: up, down, none
	apiErrors *prometheus.CounterVec // api, kind: transient, permanent
	cycles    *prometheus.CounterVec // result: ok, skipped, failed
	conflicts prometheus.Counter
	// superseded counts decisions left unapplied because another writer
	// changed the worker's count under them.
	superseded prometheus.Counter
	deleted    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		demand: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bullpen_appplatform_demand_jobs", Help: "Jobs counted as demand at the last complete poll, by status (queued, in_progress).",
		}, []string{"status"}),
		instances: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bullpen_appplatform_instances", Help: "The worker's instance_count in the app spec, as last read or set.",
		}),
		score: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bullpen_appplatform_breach_score", Help: "Breach score of the direction breached at the last decision (0 for the other).",
		}, []string{"direction"}),
		decisions: promreg.Counters("bullpen_appplatform_decisions_total",
			"Autoscaler decisions by action (up, down, none).", "action"),
		apiErrors: promreg.Counters("bullpen_appplatform_api_errors_total",
			"Failed API calls by API (github, digitalocean) and kind (transient, permanent).", "api", "kind"),
		cycles: promreg.Counters("bullpen_appplatform_cycles_total",
			"Polls by result (ok; skipped: transient error or rate limit; failed: needs a human).", "result"),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_appplatform_spec_conflicts_total", Help: "Concurrent changes of the app spec met while scaling.",
		}),
		superseded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_appplatform_superseded_decisions_total",
			Help: "Scaling decisions left unapplied because another writer changed the worker's count after the decision's read.",
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bullpen_appplatform_dead_runners_deleted_total", Help: "Offline, idle runners removed from GitHub.",
		}),
	}
	promreg.AtZero(m.decisions, "up", "down", "none")
	promreg.AtZero(m.cycles, "ok", "skipped", "failed")
	if err := promreg.Register(reg, "app platform autoscaler", m.demand, m.instances, m.score, m.decisions, m.apiErrors, m.cycles, m.conflicts, m.superseded, m.deleted); err != nil {
		return nil, err
	}
	return m, nil
}
