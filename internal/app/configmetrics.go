package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// The results of a configuration read that found something to act on (an
// unchanged one is not counted).
const (
	reloadLoaded     = "loaded"     // put in force
	reloadRefused    = "refused"    // invalid: the one in force is kept
	reloadUnreadable = "unreadable" // the source did not answer: the one in force is kept
)

// configReloads counts the configuration reads by result, and says whether
// the newest configuration read is refused: a refusal is counted once per
// version of the file, so an alert on the counter alone would clear while
// the invalid file stays.
type configReloads struct {
	reads   *prometheus.CounterVec
	refused prometheus.Gauge
}

// newConfigReloads registers bullpen_config_reloads_total, its series
// present from the start at zero, and bullpen_config_refused.
func newConfigReloads(reg prometheus.Registerer) (*configReloads, error) {
	m := &configReloads{
		reads: promreg.Counters("bullpen_config_reloads_total",
			"Configuration reads that found something to act on, by result (loaded: put in force; refused: invalid, the one in force kept; unreadable: the source did not answer, the one in force kept).",
			"result"),
		refused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bullpen_config_refused",
			Help: "1 while the newest configuration read is invalid and an older one stays in force; 0 once one is loaded.",
		}),
	}
	if err := promreg.Register(reg, "configuration", m.reads, m.refused); err != nil {
		return nil, err
	}
	promreg.AtZero(m.reads, reloadLoaded, reloadRefused, reloadUnreadable)
	return m, nil
}

// count records a read's result. An unreadable source leaves the refused
// gauge as it was: what the source holds is unknown.
func (m *configReloads) count(result string) {
	m.reads.WithLabelValues(result).Inc()
	switch result {
	case reloadLoaded:
		m.refused.Set(0)
	case reloadRefused:
		m.refused.Set(1)
	}
}

// backInForce: the newest file read is the one in force again (an invalid
// edit reverted), so none is refused; nothing new was loaded to count.
func (m *configReloads) backInForce() { m.refused.Set(0) }
