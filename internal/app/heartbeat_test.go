package app_test

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// On the embedded store an instance's heartbeat row is written at most
// every 30 s (with the default silence allowance): a fleet of agents
// beating every 5 s would otherwise write a row each per beat.
func TestTheEmbeddedStoreWritesHeartbeatsAtItsResolution(t *testing.T) {
	clk := clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	a := newApp(t, app.Options{Clock: clk})
	ctx := t.Context()
	if err := a.Store.CreateInstances(ctx, []domain.Instance{{ID: "bp-1", CloudID: "i-1", State: domain.StateReady}}); err != nil {
		t.Fatal(err)
	}
	first := clk.Now()
	for range 3 { // beats 5 s apart, each flushed
		if err := a.Agents.Heartbeat(ctx, "i-1"); err != nil {
			t.Fatal(err)
		}
		if err := a.Agents.FlushHeartbeats(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Advance(5 * time.Second)
	}
	in, err := a.Store.GetInstance(ctx, "bp-1")
	if err != nil || !in.Heartbeat.Equal(first) {
		t.Fatalf("stored heartbeat %v (%v), want the first beat's %v: the others are within the resolution", in.Heartbeat, err, first)
	}
}
