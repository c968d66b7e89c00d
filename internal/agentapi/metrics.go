package agentapi

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// Endpoints and outcomes are the only label values: ids never become labels.
const (
	endpointHello     = "hello"
	endpointHeartbeat = "heartbeat"
	endpointNext      = "next"
	endpointSignal    = "signal"
	endpointOther     = "other"
)

type metrics struct {
	requests  *prometheus.CounterVec
	longPolls prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: promreg.Counters("bullpen_agentapi_requests_total",
			"Agent API requests by endpoint and outcome (ok, bad_request, too_large, unauthorized, instance_ended, token_issued, rejected, unavailable, not_found).", "endpoint", "outcome"),
		longPolls: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bullpen_agentapi_long_polls",
			Help: "Agents waiting in a long poll for their next instruction.",
		}),
	}
	if reg == nil {
		return m
	}
	m.requests = register(reg, m.requests)
	m.longPolls = register(reg, m.longPolls)
	return m
}

// register registers c, or returns the collector already registered under
// its name (a second server in one process shares the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(fmt.Sprintf("agent API metrics: %v", err)) // a programming error: two metrics with one name
}
