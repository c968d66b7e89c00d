package spotbreaker_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/promtest"
	"github.com/bullpen-ci/bullpen/internal/spotbreaker"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// flaky is a replica's way to the shared store, which can fail, and counts
// the reads made through it.
type flaky struct {
	domain.Interruptions
	failWrites, failReads atomic.Bool
	reads                 atomic.Int64
}

var errDown = errors.New("store down")

func (f *flaky) RecordInterruption(ctx context.Context, i domain.Interruption) error {
	if f.failWrites.Load() {
		return errDown
	}
	return f.Interruptions.RecordInterruption(ctx, i)
}

func (f *flaky) ListInterruptions(ctx context.Context, since time.Time) ([]domain.Interruption, error) {
	f.reads.Add(1)
	if f.failReads.Load() {
		return nil, errDown
	}
	return f.Interruptions.ListInterruptions(ctx, since)
}

// replicas are breakers on one store and one clock, as the replicas of
// one bullpen (or two serve on one SQLite file) are.
type replicas struct {
	clk   *clock.Virtual
	store domain.Interruptions
}

func newReplicas(t *testing.T) replicas {
	clk := clock.NewVirtual(t0)
	st, _ := sqlitetest.Open(t, clk)
	return replicas{clk: clk, store: st}
}

// replica starts a breaker on the shared store, through a way of its own.
func (rs replicas) replica(t *testing.T) (rig, *flaky) {
	t.Helper()
	way := &flaky{Interruptions: rs.store}
	r := rig{clk: rs.clk, reg: prometheus.NewRegistry(), log: &testlog.Buffer{}}
	var err error
	r.b, err = spotbreaker.New(spotbreaker.Options{Store: way}, r.clk, slog.New(slog.NewTextHandler(r.log, nil)), r.reg)
	if err != nil {
		t.Fatal(err)
	}
	return r, way
}

func (r rig) opened(t *testing.T) int {
	t.Helper()
	return len(r.log.Lines("level=WARN", "spot circuit breaker open", "runner=spot-x64"))
}

// One interruption heard of by each replica opens the breaker on both: on
// the one that heard the second at once, on the other at its next read,
// within the refresh period; both close at the same instant.
func TestInterruptionsHeardByTwoReplicasOpenBoth(t *testing.T) {
	rs := newReplicas(t)
	a, _ := rs.replica(t)
	b, _ := rs.replica(t)
	a.interruptAt("spot-x64", 0)
	rs.clk.AdvanceTo(t0.Add(time.Minute - time.Second))
	if !a.b.SpotAllowed("spot-x64") || !b.b.SpotAllowed("spot-x64") {
		t.Fatal("one interruption opened a breaker")
	}
	b.interruptAt("spot-x64", time.Minute)
	opened := t0.Add(time.Minute)
	want := spotbreaker.Open{Runner: "spot-x64", OpenedAt: opened, Until: opened.Add(30 * time.Minute), Interruptions: 2}
	if b.b.SpotAllowed("spot-x64") || b.opened(t) != 1 {
		t.Fatalf("the replica that heard the second interruption launches spot:\n%s", b.log)
	}
	// a read the history a second ago: it learns of the opening at its
	// next read, not at every launch.
	if !a.b.SpotAllowed("spot-x64") {
		t.Fatal("the other replica read the store before its refresh period")
	}
	rs.clk.AdvanceTo(t0.Add(time.Minute - time.Second + spotbreaker.DefaultRefresh))
	for name, r := range map[string]rig{"the recording replica": b, "the other replica": a} {
		if got := r.b.Opened(); len(got) != 1 || got[0] != want {
			t.Errorf("%s: open breakers %+v, want %+v", name, got, want)
		}
		if r.b.SpotAllowed("spot-x64") || !r.b.SpotAllowed("spot-arm64") {
			t.Errorf("%s: spot allowed for spot-x64 or not for spot-arm64", name)
		}
		if n := r.opened(t); n != 1 {
			t.Errorf("%s: %d WARN lines for the opening:\n%s", name, n, r.log)
		}
		if sample(t, r, "bullpen_spot_breaker_open", "spot-x64") != 1 || sample(t, r, "bullpen_spot_breaker_openings_total", "spot-x64") != 1 {
			t.Errorf("%s: the gauge or the openings do not show the opening", name)
		}
	}
	rs.clk.AdvanceTo(want.Until)
	for name, r := range map[string]rig{"the recording replica": b, "the other replica": a} {
		if !r.b.SpotAllowed("spot-x64") || sample(t, r, "bullpen_spot_breaker_open", "spot-x64") != 0 {
			t.Errorf("%s: still open after the cooldown", name)
		}
		if n := len(r.log.Lines("level=INFO", "spot circuit breaker closed", "closed_at="+want.Until.Format("2006-01-02T15:04:05.000Z07:00"))); n != 1 {
			t.Errorf("%s: %d INFO lines for the close:\n%s", name, n, r.log)
		}
	}
}

// A replica started while a breaker is open keeps it open, and one
// interruption before a restart and one after open it.
func TestARestartForgetsNoInterruption(t *testing.T) {
	rs := newReplicas(t)
	before, _ := rs.replica(t)
	before.interruptAt("spot-x64", 0, time.Minute)
	started, _ := rs.replica(t)
	rs.clk.AdvanceTo(t0.Add(2 * time.Minute))
	if got := started.b.Opened(); len(got) != 1 || !got[0].OpenedAt.Equal(t0.Add(time.Minute)) || started.opened(t) != 1 {
		t.Fatalf("a replica started during the cooldown: open %+v, log:\n%s", got, started.log)
	}

	before.interruptAt("spot-arm64", 3*time.Minute)
	restarted, _ := rs.replica(t)
	restarted.interruptAt("spot-arm64", 4*time.Minute)
	if restarted.b.SpotAllowed("spot-arm64") {
		t.Fatal("the interruption heard of before the restart was forgotten")
	}
}

// The launch path reads the store at most once per refresh period,
// however many launches ask.
func TestSpotAllowedReadsTheStoreOncePerRefresh(t *testing.T) {
	rs := newReplicas(t)
	r, way := rs.replica(t)
	for range 100 {
		r.b.SpotAllowed("spot-x64")
	}
	if n := way.reads.Load(); n != 1 {
		t.Fatalf("%d reads for 100 launches within the refresh period, want 1", n)
	}
	rs.clk.Advance(spotbreaker.DefaultRefresh - time.Microsecond)
	r.b.SpotAllowed("spot-x64")
	rs.clk.Advance(time.Microsecond)
	r.b.SpotAllowed("spot-x64")
	r.b.SpotAllowed("spot-x64")
	if n := way.reads.Load(); n != 2 {
		t.Fatalf("%d reads once the refresh period has passed, want 2", n)
	}
}

// A store that fails leaves the replica deciding on what it last read and
// heard of itself, with a WARN line and a count for each failure; what it
// could not write is written once the store answers, and the other
// replicas count it then.
func TestAFailingStoreKeepsTheLastView(t *testing.T) {
	rs := newReplicas(t)
	a, way := rs.replica(t)
	b, _ := rs.replica(t)
	b.interruptAt("spot-x64", 0)
	rs.clk.AdvanceTo(t0.Add(10 * time.Second))
	a.b.SpotAllowed("spot-x64") // reads b's interruption

	way.failWrites.Store(true)
	a.interruptAt("spot-x64", time.Minute)
	if a.b.SpotAllowed("spot-x64") || a.opened(t) != 1 {
		t.Fatalf("an interruption the store did not keep opened nothing here:\n%s", a.log)
	}
	rs.clk.Advance(spotbreaker.DefaultRefresh)
	if a.b.SpotAllowed("spot-x64") {
		t.Fatal("a failed write closed the breaker")
	}
	if n := len(a.log.Lines("level=WARN", "did not keep a spot interruption", "runner=spot-x64", "store down")); n != 2 {
		t.Fatalf("%d WARN lines for the two failed writes:\n%s", n, a.log)
	}
	rs.clk.Advance(spotbreaker.DefaultRefresh)
	if !b.b.SpotAllowed("spot-x64") {
		t.Fatal("the other replica counted an interruption never written")
	}

	way.failWrites.Store(false)
	a.b.SpotAllowed("spot-x64") // writes it
	rs.clk.Advance(spotbreaker.DefaultRefresh)
	if b.b.SpotAllowed("spot-x64") {
		t.Fatal("the other replica does not count the interruption written late")
	}

	way.failReads.Store(true)
	rs.clk.Advance(spotbreaker.DefaultRefresh)
	if a.b.SpotAllowed("spot-x64") || a.opened(t) != 1 {
		t.Fatalf("a failed read changed the breaker:\n%s", a.log)
	}
	if n := len(a.log.Lines("level=WARN", "cannot read the spot interruptions", "store down")); n != 1 {
		t.Fatalf("%d WARN lines for the failed read:\n%s", n, a.log)
	}
	for op, want := range map[string]float64{"write": 2, "read": 1} {
		if got, _ := promtest.Value(t, a.reg, "bullpen_spot_breaker_store_errors_total", "op", op); got != want {
			t.Errorf("%v failed %ss counted, want %v", got, op, want)
		}
	}
	if got, ok := promtest.Value(t, b.reg, "bullpen_spot_breaker_store_errors_total", "op", "read"); !ok || got != 0 {
		t.Errorf("the failures of a store that answers: %v (served %v), want 0", got, ok)
	}
}

// An interruption the store kept counts here even when the read after it
// fails.
func TestAnInterruptionWrittenCountsWhenTheReadFails(t *testing.T) {
	rs := newReplicas(t)
	r, way := rs.replica(t)
	way.failReads.Store(true)
	r.interruptAt("spot-x64", 0, time.Minute)
	if r.b.SpotAllowed("spot-x64") {
		t.Fatalf("two interruptions written, their reads failed, opened nothing:\n%s", r.log)
	}
	other, _ := rs.replica(t)
	if other.b.SpotAllowed("spot-x64") {
		t.Fatal("the interruptions were not written")
	}
}

// Launches, scrapes and interruptions on several goroutines at once.
func TestConcurrentLooksAndRecords(t *testing.T) {
	rs := newReplicas(t)
	r, _ := rs.replica(t)
	done := make(chan struct{})
	for k := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 20 {
				switch k % 4 {
				case 0:
					r.b.Record("spot-x64", rs.clk.Now())
				case 1:
					r.b.SpotAllowed("spot-x64")
				case 2:
					r.b.Opened()
				default:
					_, _ = r.reg.Gather()
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	if r.b.SpotAllowed("spot-x64") || r.opened(t) != 1 {
		t.Fatalf("40 interruptions did not open the breaker once:\n%s", r.log)
	}
}
