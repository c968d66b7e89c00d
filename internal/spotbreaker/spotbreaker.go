// Package spotbreaker is the spot circuit breaker: after Interruptions spot
// interruptions of a runner class within Window, that class launches
// on-demand for Cooldown, so that a region short of spot capacity does not
// keep killing jobs. Its state is in memory: a restart forgets recent
// interruptions, which costs at most the interruptions it takes to open
// again.
//
// The breaker keeps no timers: an open breaker whose cooldown has ended is
// closed by the next call that looks at it, a metrics scrape included, so
// the gauge is right at every scrape and the close is logged within a
// scrape interval (with the instant it ended).
package spotbreaker

import (
	"cmp"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/labels"
	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// Defaults of Options.
const (
	DefaultInterruptions = 2
	DefaultWindow        = 15 * time.Minute
	DefaultCooldown      = 30 * time.Minute
)

// Options tune the breaker; zero values take the defaults.
type Options struct {
	Interruptions int
	Window        time.Duration
	Cooldown      time.Duration
}

// Open is a runner class launching on-demand.
type Open struct {
	Runner   string    `json:"runner"`
	OpenedAt time.Time `json:"opened_at"`
	Until    time.Time `json:"until"`
	// Interruptions is how many, within the window, opened it.
	Interruptions int `json:"interruptions"`
}

// Breaker counts interruptions by runner class. It is safe for concurrent
// use.
type Breaker struct {
	opts  Options
	clock domain.Clock
	log   *slog.Logger

	mu     sync.Mutex
	recent map[string][]time.Time // interruptions within the window, by runner
	open   map[string]Open

	openGauge *prometheus.GaugeVec
	openings  *prometheus.CounterVec
}

// New returns a closed breaker; its metrics are registered with reg when
// it is not nil.
func New(o Options, clk domain.Clock, log *slog.Logger, reg prometheus.Registerer) (*Breaker, error) {
	if o.Interruptions <= 0 {
		o.Interruptions = DefaultInterruptions
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultCooldown
	}
	if clk == nil || log == nil {
		return nil, errors.New("spotbreaker: a clock and a logger are required")
	}
	b := &Breaker{opts: o, clock: clk, log: log, recent: map[string][]time.Time{}, open: map[string]Open{},
		openGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bullpen_spot_breaker_open",
			Help: "1 while a runner class launches on-demand after repeated spot interruptions."}, []string{"runner"}),
		openings: promreg.Counters("bullpen_spot_breaker_openings_total",
			"Times a runner class was switched to on-demand by the spot circuit breaker.", "runner"),
	}
	if err := promreg.Register(reg, "spot breaker", collector{b}); err != nil {
		return nil, err
	}
	return b, nil
}

// Record counts a spot interruption of a machine of runner at at; the
// breaker opens for runner when it is the Interruptions-th within Window.
// Interruptions while it is open are counted towards the next opening but
// neither reopen nor prolong it. A report older than the window counts for
// nothing.
func (b *Breaker) Record(runner string, at time.Time) {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeEnded(now)
	cutoff := now.Add(-b.opts.Window)
	if at.After(now) {
		cutoff = at.Add(-b.opts.Window)
	}
	kept := slices.DeleteFunc(b.recent[runner], func(t time.Time) bool { return !t.After(cutoff) })
	if at.After(cutoff) {
		kept = append(kept, at)
	}
	b.recent[runner] = kept
	if _, open := b.open[runner]; open || len(kept) < b.opts.Interruptions {
		return
	}
	o := Open{Runner: runner, OpenedAt: now, Until: now.Add(b.opts.Cooldown), Interruptions: len(kept)}
	b.open[runner] = o
	b.recent[runner] = nil
	b.setGauge(runner)
	b.openings.WithLabelValues(metricRunner(runner)).Inc()
	b.log.Warn("spot circuit breaker open: launching on-demand", "runner", runner, "interruptions", o.Interruptions,
		"window", b.opts.Window, "until", o.Until)
}

// SpotAllowed reports whether runner may launch spot machines now.
func (b *Breaker) SpotAllowed(runner string) bool {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeEnded(now)
	_, open := b.open[runner]
	return !open
}

// Opened lists the runner classes launching on-demand now, by name.
func (b *Breaker) Opened() []Open {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeEnded(now)
	out := make([]Open, 0, len(b.open))
	for _, o := range b.open {
		out = append(out, o)
	}
	slices.SortFunc(out, func(x, y Open) int { return cmp.Compare(x.Runner, y.Runner) })
	return out
}

// closeEnded closes the breakers whose cooldown has ended by now; b.mu is
// held.
func (b *Breaker) closeEnded(now time.Time) {
	for runner, o := range b.open {
		if now.Before(o.Until) {
			continue
		}
		delete(b.open, runner)
		b.setGauge(runner)
		b.log.Info("spot circuit breaker closed: launching spot again", "runner", runner,
			"opened_at", o.OpenedAt, "closed_at", o.Until)
	}
}

// metricRunner is runner as a metric label: the configuration's runner
// classes by name, and every ad-hoc one (a job's own spec, named by its
// hash) as "adhoc", since their names come and go with the jobs and a
// series each would stay forever.
func metricRunner(runner string) string {
	if strings.HasPrefix(runner, labels.AdhocPrefix) {
		return "adhoc"
	}
	return runner
}

// setGauge sets the open gauge of runner's label: how many of the classes
// it stands for are open (1 or 0 for a named class); b.mu is held.
func (b *Breaker) setGauge(runner string) {
	label := metricRunner(runner)
	n := 0
	for r := range b.open {
		if metricRunner(r) == label {
			n++
		}
	}
	b.openGauge.WithLabelValues(label).Set(float64(n))
}

// collector closes the breakers that have ended before their gauge is
// read, so that a scrape never shows a breaker open past its cooldown.
type collector struct{ b *Breaker }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	c.b.openGauge.Describe(ch)
	c.b.openings.Describe(ch)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	now := c.b.clock.Now()
	c.b.mu.Lock()
	c.b.closeEnded(now)
	c.b.mu.Unlock()
	c.b.openGauge.Collect(ch)
	c.b.openings.Collect(ch)
}
