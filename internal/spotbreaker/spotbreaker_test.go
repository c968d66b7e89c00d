package spotbreaker_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/promtest"
	"github.com/bullpen-ci/bullpen/internal/spotbreaker"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

var t0 = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

type rig struct {
	b   *spotbreaker.Breaker
	clk *clock.Virtual
	reg *prometheus.Registry
	log *testlog.Buffer
}

func newRig(t *testing.T, o spotbreaker.Options) rig {
	t.Helper()
	r := rig{clk: clock.NewVirtual(t0), reg: prometheus.NewRegistry(), log: &testlog.Buffer{}}
	var err error
	r.b, err = spotbreaker.New(o, r.clk, slog.New(slog.NewTextHandler(r.log, nil)), r.reg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// interruptAt records an interruption of runner at each offset from t0,
// the clock moving to each in turn.
func (r rig) interruptAt(runner string, offsets ...time.Duration) {
	for _, d := range offsets {
		r.clk.AdvanceTo(t0.Add(d))
		r.b.Record(runner, r.clk.Now())
	}
}

func TestSpotAllowed(t *testing.T) {
	m := time.Minute
	quick := spotbreaker.Options{Interruptions: 3, Window: 5 * m, Cooldown: 10 * m}
	cases := []struct {
		name          string
		opts          spotbreaker.Options
		interruptions []time.Duration // of runner spot-x64, from t0
		at            time.Duration   // when spot is asked for
		spot          bool
		openings      int
	}{
		{"no interruption", spotbreaker.Options{}, nil, 0, true, 0},
		{"one interruption is not enough", spotbreaker.Options{}, []time.Duration{0}, m, true, 0},
		{"two within the window open it", spotbreaker.Options{}, []time.Duration{0, 14 * m}, 14 * m, false, 1},
		{"two a window apart do not add up", spotbreaker.Options{}, []time.Duration{0, 15 * m}, 15 * m, true, 0},
		{"the window slides: the first has left it when the third comes", spotbreaker.Options{},
			[]time.Duration{0, 15 * m, 16 * m}, 16 * m, false, 1},
		{"open until the cooldown ends", spotbreaker.Options{}, []time.Duration{0, m}, 31*m - time.Second, false, 1},
		{"closed once the cooldown has ended", spotbreaker.Options{}, []time.Duration{0, m}, 31 * m, true, 1},
		{"interruptions while open neither reopen nor prolong it", spotbreaker.Options{},
			[]time.Duration{0, m, 2 * m, 3 * m, 20 * m}, 31 * m, true, 1},
		{"interruptions while open count towards the next opening", spotbreaker.Options{},
			[]time.Duration{0, m, 25 * m, 32 * m}, 32 * m, false, 2},
		{"three in five minutes, configured", quick, []time.Duration{0, 2 * m, 4 * m}, 4 * m, false, 1},
		{"two in five minutes are not three", quick, []time.Duration{0, 4 * m}, 4 * m, true, 0},
		{"three over six minutes are not three in five", quick, []time.Duration{0, 2 * m, 6 * m}, 6 * m, true, 0},
		{"a configured cooldown ends", quick, []time.Duration{0, 2 * m, 4 * m}, 14 * m, true, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, c.opts)
			r.interruptAt("spot-x64", c.interruptions...)
			r.clk.AdvanceTo(t0.Add(c.at))
			if got := r.b.SpotAllowed("spot-x64"); got != c.spot {
				t.Errorf("spot allowed %v, want %v", got, c.spot)
			}
			if !r.b.SpotAllowed("spot-arm64") {
				t.Error("another runner class lost spot")
			}
			if got := sample(t, r, "bullpen_spot_breaker_openings_total", "spot-x64"); got != float64(c.openings) {
				t.Errorf("%v openings, want %d", got, c.openings)
			}
			if open := len(r.b.Opened()) == 1; open == c.spot {
				t.Errorf("listed open: %v with spot allowed %v", open, c.spot)
			}
		})
	}
}

// An interruption reported after the window has passed says nothing about
// spot capacity now.
func TestALateReportDoesNotCount(t *testing.T) {
	r := newRig(t, spotbreaker.Options{})
	r.clk.AdvanceTo(t0.Add(time.Hour))
	r.b.Record("spot-x64", r.clk.Now())
	r.b.Record("spot-x64", t0)
	if !r.b.SpotAllowed("spot-x64") || sample(t, r, "bullpen_spot_breaker_openings_total", "spot-x64") != 0 {
		t.Fatal("an interruption an hour old opened the breaker")
	}
}

// The breaker is listed while open, logged when it opens and when it
// closes, and its gauge falls back at the scrape after its cooldown even
// when nothing launched meanwhile.
func TestAnOpeningIsListedLoggedAndMeasured(t *testing.T) {
	r := newRig(t, spotbreaker.Options{})
	r.interruptAt("spot-x64", 0, 10*time.Minute)
	opened := t0.Add(10 * time.Minute)
	want := spotbreaker.Open{Runner: "spot-x64", OpenedAt: opened, Until: opened.Add(30 * time.Minute), Interruptions: 2}
	if got := r.b.Opened(); len(got) != 1 || got[0] != want {
		t.Fatalf("open breakers %+v, want %+v", got, want)
	}
	if n := len(r.log.Lines("level=WARN", "spot circuit breaker open", "runner=spot-x64", "interruptions=2")); n != 1 {
		t.Fatalf("%d WARN lines for the opening:\n%s", n, r.log)
	}
	if got := sample(t, r, "bullpen_spot_breaker_open", "spot-x64"); got != 1 {
		t.Fatalf("gauge %v while open", got)
	}
	r.clk.AdvanceTo(want.Until)
	if got := sample(t, r, "bullpen_spot_breaker_open", "spot-x64"); got != 0 {
		t.Fatalf("gauge %v after the cooldown", got)
	}
	if n := len(r.log.Lines("level=INFO", "spot circuit breaker closed", "runner=spot-x64")); n != 1 {
		t.Fatalf("%d INFO lines for the close:\n%s", n, r.log)
	}
	if got := r.b.Opened(); len(got) != 0 {
		t.Fatalf("open breakers %+v after the cooldown", got)
	}
}

// sample scrapes the registry for the value of metric name for runner; a
// series never set reads 0.
func sample(t *testing.T, r rig, name, runner string) float64 {
	t.Helper()
	v, _ := promtest.Value(t, r.reg, name, "runner", runner)
	return v
}

// Ad-hoc runner classes (a job's own spec, named by its hash) share one
// series, "adhoc", counting those open: a series each would outlive them.
func TestAdhocClassesShareOneSeries(t *testing.T) {
	r := newRig(t, spotbreaker.Options{})
	r.interruptAt("adhoc-1111", 0, time.Minute)
	r.interruptAt("adhoc-2222", 0, time.Minute)
	if got := sample(t, r, "bullpen_spot_breaker_open", "adhoc"); got != 2 {
		t.Fatalf("adhoc gauge %v with two ad-hoc classes open, want 2", got)
	}
	if got := sample(t, r, "bullpen_spot_breaker_openings_total", "adhoc"); got != 2 {
		t.Fatalf("adhoc openings %v, want 2", got)
	}
	if got := sample(t, r, "bullpen_spot_breaker_open", "adhoc-1111"); got != 0 {
		t.Fatalf("an ad-hoc class has a series of its own: %v", got)
	}
	r.clk.AdvanceTo(r.b.Opened()[0].Until)
	if got := sample(t, r, "bullpen_spot_breaker_open", "adhoc"); got != 0 {
		t.Fatalf("adhoc gauge %v after the cooldowns", got)
	}
}
