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
	// unregistered counts new machines let go because their runner never
	// registered for their job.
	unregistered prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		jobs: promreg.Counters("bullpen_provision_jobs_total",
			"Launch-queue jobs by outcome (reuse, cold, requeued; rejected: the cloud cannot serve them as asked; rejected_again: so, for a job readmitted after a rejection; dropped: no longer waiting for a runner, unknown, a duplicate message, an unreadable one, or sent back already by whoever took its instance; deferred: a machine launched elsewhere may still serve it, and its message comes back once that launch is over).", "outcome"),
		exhausted: promreg.Counters("bullpen_resource_pool_exhausted_total",
			"Resource-pool searches that found nothing, by kind (global: queue empty, and again on a second look when the store knows idle instances of the class; local: same instance seen N times; fresh: the job's pool does not reuse, so no search; unfed: no pool that reuses its instances runs the class, so no search).", "kind"),
		claims: promreg.Counters("bullpen_resource_pool_claims_total",
			"Claims of resource-pool instances, won or lost.", "result"),
		postClaim: promreg.Counters("bullpen_resource_pool_post_claim_total",
			"Claimed instances that failed a post-claim check (failed), were given back (rolled_back), or were retired for a spec older than their pool's (outdated).", "outcome"),
		fleets: promreg.Counters("bullpen_provision_fleets_total",
			"Fleet requests for new instances, by result (fulfilled; partial: the jobs filled are served, the others requeued; failed) and, for those not fulfilled, cause (capacity, throttled, invalid, other).", "result", "cause"),
		unregistered: prometheus.NewCounter(prometheus.CounterOpts{Name: "bullpen_provision_new_instances_unregistered_total",
			Help: "New instances terminated because their runner did not register for their job within the creation timeout, or their agent failed first."}),
	}
	if err := promreg.Register(reg, "provision", m.jobs, m.exhausted, m.claims, m.postClaim, m.fleets, m.unregistered); err != nil {
		return nil, err
	}
	// Rejections at zero from the start: an alert on their increase
	// (BullpenJobsRejected) sees the first one.
	promreg.AtZero(m.jobs, outcomeRejected)
	return m, nil
}
