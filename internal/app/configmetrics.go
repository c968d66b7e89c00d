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
	// unreadable says whether the newest read of the source failed: an
	// alert on the counter of failed reads fires on failures spread
	// between good reads, and never for a source down across reads fewer
	// than its window holds (a --reload of 10 minutes).
	unreadable prometheus.Gauge
}

// newConfigReloads registers bullpen_config_reloads_total, its series
// present from the start at zero, bullpen_config_refused and
// bullpen_config_unreadable.
func newConfigReloads(reg prometheus.Registerer) (*configReloads, error) {
	m := &configReloads{
		reads: promreg.Counters("bullpen_config_reloads_total",
			"Configuration reads that found something to act on, by result (loaded: put in force; refused: invalid, the one in force kept; unreadable: the source did not answer, the one in force kept).",
			"result"),
		refused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bullpen_config_refused",
			Help: "1 while the newest configuration read is invalid and an older one stays in force; 0 once one is loaded.",
		}),
		unreadable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bullpen_config_unreadable",
			Help: "1 while the newest read of the configuration source failed and the configuration in force is kept; 0 once the source is read again.",
		}),
	}
	if err := promreg.Register(reg, "configuration", m.reads, m.refused, m.unreadable); err != nil {
		return nil, err
	}
	promreg.AtZero(m.reads, reloadLoaded, reloadRefused, reloadUnreadable)
	return m, nil
}

// count records a read's result. An unreadable source leaves the refused
// gauge as it was: what the source holds is unknown.
func (m *configReloads) count(result string) {
	m.reads.WithLabelValues(result).Inc()
	if result == reloadUnreadable {
		m.unreadable.Set(1)
	}
	switch result {
	case reloadLoaded:
		m.refused.Set(0)
	case reloadRefused:
		m.refused.Set(1)
	}
}

// readable: the source answered a read, whatever it held.
func (m *configReloads) readable() { m.unreadable.Set(0) }

// backInForce: the newest file read is the one in force again (an invalid
// edit reverted), so none is refused; nothing new was loaded to count.
func (m *configReloads) backInForce() { m.refused.Set(0) }
