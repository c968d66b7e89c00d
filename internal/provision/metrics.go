package provision

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
)

type metrics struct {
	jobs      *prometheus.CounterVec
	exhausted *prometheus.CounterVec
	claims    *prometheus.CounterVec
	postClaim *prometheus.CounterVec
	fleets    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bullpen_provision_jobs_total", Help: "Launch-queue jobs by outcome (reuse, cold, requeued; rejected: the cloud cannot serve them as asked; dropped: no longer waiting for a runner, unknown, a duplicate message or an unreadable one).",
		}, []string{"outcome"}),
		exhausted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bullpen_resource_pool_exhausted_total", Help: "Resource-pool searches that found nothing, by kind (global: queue empty; local: same instance seen N times; fresh: the job's pool does not reuse, so no search).",
		}, []string{"kind"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bullpen_resource_pool_claims_total", Help: "Claims of resource-pool instances, won or lost.",
		}, []string{"result"}),
		postClaim: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bullpen_resource_pool_post_claim_total", Help: "Claimed instances that failed a post-claim check or were rolled back.",
		}, []string{"outcome"}),
		fleets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bullpen_provision_fleets_total", Help: "Fleet requests for new instances, fulfilled or failed.",
		}, []string{"result"}),
	}
	if err := promreg.Register(reg, "provision", m.jobs, m.exhausted, m.claims, m.postClaim, m.fleets); err != nil {
		return nil, err
	}
	return m, nil
}
