// Package spotbreaker is the spot circuit breaker: after Interruptions spot
// interruptions of a runner class within Window, that class launches
// on-demand for Cooldown, so that a region short of spot capacity does not
// keep killing jobs.
//
// The interruptions are kept in the store (domain.Interruptions), shared
// by the replicas: each decides from the same history, replayed in the
// order the interruptions came, so an interruption heard of by any
// replica counts on all of them, they agree on which classes are open,
// and a restart forgets none. A breaker writes each interruption it hears
// of and reads the history back at once; otherwise a look reads it again
// once the last read is Refresh old, so the launch path costs no store
// read per launch and a breaker opened by another replica is seen here
// within Refresh. A store that fails leaves a breaker deciding on what it
// last read and on the interruptions it heard of itself since, written at
// a later read; each failure is logged and counted. Every replica logs and
// counts the openings it sees, so its metrics are the same on each.
// Without a store a breaker counts the interruptions it hears of alone,
// in memory.
//
// The breaker keeps no timers: an open breaker whose cooldown has ended is
// closed by the next call that looks at it, a metrics scrape included, so
// the gauge is right at every scrape and the close is logged within a
// scrape interval (with the instant it ended).
package spotbreaker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	DefaultRefresh       = 5 * time.Second
)

// storeTimeout bounds a store call made from a look, which has no context
// of its own: a launch waits for it.
const storeTimeout = 5 * time.Second

// Options tune the breaker; zero values take the defaults.
type Options struct {
	Interruptions int
	Window        time.Duration
	Cooldown      time.Duration
	// Refresh is how old the history read from the store may be before a
	// look reads it again.
	Refresh time.Duration
	// Store keeps the interruptions the replicas share; nil counts this
	// process's alone.
	Store domain.Interruptions
}

// Open is a runner class launching on-demand.
type Open struct {
	Runner   string    `json:"runner"`
	OpenedAt time.Time `json:"opened_at"`
	Until    time.Time `json:"until"`
	// Interruptions is how many, within the window, opened it.
	Interruptions int `json:"interruptions"`
}

// Breaker decides from the interruptions by runner class. It is safe for
// concurrent use.
type Breaker struct {
	opts  Options
	clock domain.Clock
	log   *slog.Logger

	// storeMu is held across a store round (writes and a read), so that
	// reads are applied in the order they were made; a look that finds it
	// taken decides on what was read before rather than wait.
	storeMu sync.Mutex

	mu sync.Mutex
	// read is the history as last read from the store; without a store,
	// every interruption heard of.
	read []domain.Interruption
	// unsaved are interruptions heard of here that the store refused:
	// counted here, and written again at the next read.
	unsaved []domain.Interruption
	readAt  time.Time // when the store was last read, or tried; zero: never
	open    map[string]Open

	openGauge   *prometheus.GaugeVec
	openings    *prometheus.CounterVec
	storeErrors *prometheus.CounterVec
}

// New returns a breaker, closed until the store's history opens it; its
// metrics are registered with reg when it is not nil.
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
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if clk == nil || log == nil {
		return nil, errors.New("spotbreaker: a clock and a logger are required")
	}
	b := &Breaker{opts: o, clock: clk, log: log, open: map[string]Open{},
		openGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bullpen_spot_breaker_open",
			Help: "1 while a runner class launches on-demand after repeated spot interruptions."}, []string{"runner"}),
		openings: promreg.Counters("bullpen_spot_breaker_openings_total",
			"Times a runner class was switched to on-demand by the spot circuit breaker.", "runner"),
		storeErrors: promreg.Counters("bullpen_spot_breaker_store_errors_total",
			"Spot interruptions the store failed to write, and reads of them it failed, by the spot circuit breaker.", "op"),
	}
	promreg.AtZero(b.storeErrors, opWrite, opRead)
	if err := promreg.Register(reg, "spot breaker", collector{b}); err != nil {
		return nil, err
	}
	return b, nil
}

// The store calls counted when they fail.
const (
	opWrite = "write"
	opRead  = "read"
)

// horizon is how far back the history matters: an opening in force now
// was decided within Cooldown and Window, on a count that an opening
// before it may have emptied; a spell of max(Window, Cooldown) without an
// interruption leaves every breaker closed and its count empty, so
// replicas replaying from instants a little apart agree unless a class
// was interrupted that often all along.
func (b *Breaker) horizon() time.Duration {
	return b.opts.Window + b.opts.Cooldown + max(b.opts.Window, b.opts.Cooldown)
}

// Record counts a spot interruption of a machine of runner at at; the
// breaker opens for runner when it is the Interruptions-th within Window.
// Interruptions while it is open are counted towards the next opening but
// neither reopen nor prolong it. A report older than the window counts for
// nothing.
func (b *Breaker) Record(runner string, at time.Time) {
	now := b.clock.Now()
	if !at.After(now.Add(-b.opts.Window)) {
		return
	}
	i := domain.Interruption{ID: newID(), Runner: runner, At: at, Expires: at.Add(b.horizon())}
	if b.opts.Store == nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.read = append(b.read, i)
		b.decide(now)
		return
	}
	b.storeMu.Lock()
	defer b.storeMu.Unlock()
	b.mu.Lock()
	b.unsaved = append(b.unsaved, i)
	b.mu.Unlock()
	b.sync(now)
}

// newID names an interruption uniquely, so that writing it again after an
// answer was lost keeps it once.
func newID() string {
	var id [12]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	return hex.EncodeToString(id[:])
}

// sync writes the unsaved interruptions and reads the history; b.storeMu
// is held. A failure keeps what was read before, and is not tried again
// for Refresh.
func (b *Breaker) sync(now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	b.mu.Lock()
	pending := slices.Clone(b.unsaved)
	b.mu.Unlock()
	written, werr := 0, error(nil)
	for _, i := range pending {
		if werr = b.opts.Store.RecordInterruption(ctx, i); werr != nil {
			break
		}
		written++
	}
	var history []domain.Interruption
	var rerr error
	if werr == nil {
		history, rerr = b.opts.Store.ListInterruptions(ctx, now.Add(-b.horizon()))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.readAt = now
	// Those written are the store's now, and in the history it lists.
	saved := pending[:written]
	b.read = append(b.read, saved...)
	b.unsaved = slices.DeleteFunc(b.unsaved, func(i domain.Interruption) bool {
		return slices.ContainsFunc(saved, func(w domain.Interruption) bool { return w.ID == i.ID })
	})
	switch {
	case werr != nil:
		b.storeErrors.WithLabelValues(opWrite).Inc()
		b.log.Warn("spot circuit breaker: the store did not keep a spot interruption; counted on this replica alone until it is written",
			"runner", pending[written].Runner, "at", pending[written].At, "unwritten", len(b.unsaved), "err", werr)
	case rerr != nil:
		b.storeErrors.WithLabelValues(opRead).Inc()
		b.log.Warn("spot circuit breaker: cannot read the spot interruptions from the store; deciding on those read before", "err", rerr)
	default:
		b.read = history
	}
	b.decide(now)
}

// look is the start of every call that reads the breaker: the history is
// read again once it is Refresh old, unless another call is reading it.
// It returns the instant the call looks at.
func (b *Breaker) look() time.Time {
	now := b.clock.Now()
	if b.opts.Store == nil || !b.due(now) || !b.storeMu.TryLock() {
		return now
	}
	defer b.storeMu.Unlock()
	if b.due(now) { // unless the call that held it has just read
		b.sync(now)
	}
	return now
}

func (b *Breaker) due(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.readAt.IsZero() || !now.Before(b.readAt.Add(b.opts.Refresh))
}

// decide replays the history, the unsaved interruptions with it, and
// opens and closes the breakers as it says; b.mu is held.
func (b *Breaker) decide(now time.Time) {
	b.closeEnded(now)
	since := now.Add(-b.horizon())
	gone := func(i domain.Interruption) bool { return i.At.Before(since) || !now.Before(i.Expires) }
	b.read = slices.DeleteFunc(b.read, gone)
	b.unsaved = slices.DeleteFunc(b.unsaved, gone)
	history := append(slices.Clone(b.read), b.unsaved...)
	slices.SortFunc(history, func(x, y domain.Interruption) int {
		return cmp.Or(x.At.Compare(y.At), cmp.Compare(x.ID, y.ID))
	})
	history = slices.CompactFunc(history, func(x, y domain.Interruption) bool { return x.ID == y.ID })
	opened := replay(history, b.opts)
	for runner, o := range opened {
		if !now.Before(o.Until) {
			continue
		}
		_, was := b.open[runner]
		// One already open here is the same opening, perhaps decided on
		// fewer interruptions before: it is not counted or logged again.
		b.open[runner] = o
		if was {
			continue
		}
		b.setGauge(runner)
		b.openings.WithLabelValues(metricRunner(runner)).Inc()
		b.log.Warn("spot circuit breaker open: launching on-demand", "runner", runner, "interruptions", o.Interruptions,
			"window", b.opts.Window, "until", o.Until)
	}
	for runner, o := range b.open {
		if n, still := opened[runner]; still && now.Before(n.Until) {
			continue
		}
		// The history no longer opens it: replicas replaying a long run
		// of interruptions from instants apart may differ, and the
		// history read last is the one followed.
		b.close(runner, o, now)
	}
}

// replay runs the breaker over history, oldest first, and returns the
// opening of each runner class still in force after its last
// interruption; whether its cooldown has ended by now is the caller's.
func replay(history []domain.Interruption, o Options) map[string]Open {
	type class struct {
		recent []time.Time // within the window, since the last opening
		open   *Open
	}
	classes := map[string]*class{}
	for _, i := range history {
		c := classes[i.Runner]
		if c == nil {
			c = &class{}
			classes[i.Runner] = c
		}
		if c.open != nil && !i.At.Before(c.open.Until) {
			c.open = nil
		}
		cutoff := i.At.Add(-o.Window)
		c.recent = append(slices.DeleteFunc(c.recent, func(t time.Time) bool { return !t.After(cutoff) }), i.At)
		if c.open == nil && len(c.recent) >= o.Interruptions {
			c.open = &Open{Runner: i.Runner, OpenedAt: i.At, Until: i.At.Add(o.Cooldown), Interruptions: len(c.recent)}
			c.recent = nil
		}
	}
	out := map[string]Open{}
	for runner, c := range classes {
		if c.open != nil {
			out[runner] = *c.open
		}
	}
	return out
}

// SpotAllowed reports whether runner may launch spot machines now.
func (b *Breaker) SpotAllowed(runner string) bool {
	now := b.look()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeEnded(now)
	_, open := b.open[runner]
	return !open
}

// Opened lists the runner classes launching on-demand now, by name.
func (b *Breaker) Opened() []Open {
	now := b.look()
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
		b.close(runner, o, now)
	}
}

// close closes runner's breaker o at now, or at its end when that came
// first; b.mu is held.
func (b *Breaker) close(runner string, o Open, now time.Time) {
	closedAt := o.Until
	if now.Before(closedAt) {
		closedAt = now
	}
	delete(b.open, runner)
	b.setGauge(runner)
	b.log.Info("spot circuit breaker closed: launching spot again", "runner", runner,
		"opened_at", o.OpenedAt, "closed_at", closedAt)
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

// collector brings the breaker up to date before its gauge is read, so
// that a scrape never shows a breaker open past its cooldown, and shows
// one another replica opened.
type collector struct{ b *Breaker }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	c.b.openGauge.Describe(ch)
	c.b.openings.Describe(ch)
	c.b.storeErrors.Describe(ch)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	now := c.b.look()
	c.b.mu.Lock()
	c.b.closeEnded(now)
	c.b.mu.Unlock()
	c.b.openGauge.Collect(ch)
	c.b.openings.Collect(ch)
	c.b.storeErrors.Collect(ch)
}
