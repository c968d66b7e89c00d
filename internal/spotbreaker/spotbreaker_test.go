package spotbreaker_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/spotbreaker"
)

func newBreaker(t *testing.T) (*spotbreaker.Breaker, *clock.Virtual, *prometheus.Registry) {
	t.Helper()
	clk := clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	b, err := spotbreaker.New(spotbreaker.Options{}, clk, slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	return b, clk, reg
}

func TestTwoInterruptionsWithinTheWindowOpenTheBreaker(t *testing.T) {
	b, clk, reg := newBreaker(t)
	b.Record("spot-x64", clk.Now())
	if !b.SpotAllowed("spot-x64") {
		t.Fatal("one interruption opened the breaker")
	}
	clk.Advance(14 * time.Minute)
	b.Record("spot-x64", clk.Now())
	if b.SpotAllowed("spot-x64") || !b.SpotAllowed("other") {
		t.Fatal("the second interruption within 15 minutes did not open spot-x64's breaker alone")
	}
	if open := b.Opened(); len(open) != 1 || open[0].Runner != "spot-x64" || open[0].Interruptions != 2 || !open[0].Until.Equal(clk.Now().Add(30*time.Minute)) {
		t.Fatalf("open breakers %+v", open)
	}
	b.Record("spot-x64", clk.Now()) // while open: counted, not reopened
	if n := openings(t, reg); n != 1 {
		t.Fatalf("%v openings, want 1", n)
	}
	clk.Advance(30 * time.Minute)
	if !b.SpotAllowed("spot-x64") || len(b.Opened()) != 0 {
		t.Fatal("the breaker did not close after its cooldown")
	}
}

func TestInterruptionsOutsideTheWindowDoNotAddUp(t *testing.T) {
	b, clk, _ := newBreaker(t)
	b.Record("spot-x64", clk.Now())
	clk.Advance(15 * time.Minute)
	b.Record("spot-x64", clk.Now())
	if !b.SpotAllowed("spot-x64") {
		t.Fatal("interruptions 15 minutes apart opened the breaker")
	}
	clk.Advance(time.Minute)
	b.Record("spot-x64", clk.Now())
	if b.SpotAllowed("spot-x64") {
		t.Fatal("two interruptions a minute apart did not open the breaker")
	}
}

func openings(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "bullpen_spot_breaker_openings_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no openings counter")
	return 0
}
