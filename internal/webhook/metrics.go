package webhook

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// Outcomes of a delivery, the values of the outcome label.
const (
	OutcomeAccepted     = "accepted"     // persisted to the inbox (or already there)
	OutcomeIgnored      = "ignored"      // valid, but nothing for bullpen to do (ping included)
	OutcomeUnauthorized = "unauthorized" // signature missing, malformed or wrong
	OutcomeBadRequest   = "bad_request"  // wrong method, missing header, invalid payload
	OutcomeTooLarge     = "too_large"    // body over MaxBody, a payload over its event's limit, or its envelope over MaxEnvelope
	OutcomeUnavailable  = "unavailable"  // the inbox refused it
	OutcomeBusy         = "busy"         // every read slot stayed taken: 503, not read
)

type metrics struct {
	deliveries *prometheus.CounterVec
	seconds    *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		deliveries: promreg.Counters("bullpen_webhook_deliveries_total",
			"Webhook deliveries received, by event (ping, workflow_job, push, other, none) and outcome (accepted, ignored, unauthorized, bad_request, too_large, unavailable, busy).", "event", "outcome"),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bullpen_webhook_request_duration_seconds",
			Help:    "Time to answer a webhook delivery, body read and inbox write included, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"outcome"}),
	}
	if err := promreg.Register(reg, "webhook", m.deliveries, m.seconds); err != nil {
		return nil, err
	}
	// Every series from the start, at zero: an alert on increase() misses
	// the first delivery refused when its series appears with it at 1.
	for _, event := range []string{EventPing, EventWorkflowJob, EventPush, "other", "none"} {
		for _, outcome := range []string{OutcomeAccepted, OutcomeIgnored, OutcomeUnauthorized, OutcomeBadRequest,
			OutcomeTooLarge, OutcomeUnavailable, OutcomeBusy} {
			m.deliveries.WithLabelValues(event, outcome)
		}
	}
	return m, nil
}

// eventLabel bounds the event label: the header is chosen by whoever sends
// the request, so only the events bullpen knows get a value of their own.
func eventLabel(event string) string {
	switch event {
	case EventPing, EventWorkflowJob, EventPush:
		return event
	case "":
		return "none"
	default:
		return "other"
	}
}
