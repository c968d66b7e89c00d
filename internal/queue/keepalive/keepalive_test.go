package keepalive_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/queue/keepalive"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

const visibility = 30 * time.Second

func TestAHeldMessageStaysInvisibleUntilReleased(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	_, q := sqlitetest.Open(t, clk)
	if err := q.Send(ctx, domain.QueueLaunch, []domain.SendRequest{{Body: []byte("a")}, {Body: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, domain.QueueLaunch, 2, visibility, 0)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %d, %v", len(msgs), err)
	}
	held := keepalive.Hold(q, clk, domain.QueueLaunch, []string{msgs[0].Receipt, msgs[1].Receipt}, visibility, slog.New(slog.DiscardHandler))
	if err := q.Delete(ctx, domain.QueueLaunch, []string{msgs[1].Receipt}); err != nil { // settled while held
		t.Fatal(err)
	}
	for range 9 { // three visibility timeouts
		clk.BlockUntil(1)
		clk.Advance(visibility / 3)
	}
	clk.BlockUntil(1)
	if got, _ := q.Receive(ctx, domain.QueueLaunch, 2, visibility, 0); len(got) != 0 {
		t.Fatalf("a held message was received again after %s", 3*visibility)
	}
	held.Stop()
	clk.Advance(visibility)
	got, err := q.Receive(ctx, domain.QueueLaunch, 2, visibility, 0)
	if err != nil || len(got) != 1 || string(got[0].Body) != "a" {
		t.Fatalf("after release: %d messages, %v; want the held one alone", len(got), err)
	}
}

func TestNothingToHold(t *testing.T) {
	keepalive.Hold(nil, clock.NewVirtual(time.Now()), domain.QueueLaunch, nil, visibility, slog.Default()).Stop()
}

// A message let go from the hold keeps the visibility given it afterwards
// (a retry's delay), which the next extension would otherwise overwrite.
func TestALetMessageKeepsItsOwnDelay(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	_, q := sqlitetest.Open(t, clk)
	if err := q.Send(ctx, domain.QueuePool, []domain.SendRequest{{Body: []byte("retried")}, {Body: []byte("in hand")}}); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, domain.QueuePool, 2, visibility, 0)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %d, %v", len(msgs), err)
	}
	held := keepalive.Hold(q, clk, domain.QueuePool, []string{msgs[0].Receipt, msgs[1].Receipt}, visibility, slog.New(slog.DiscardHandler))
	defer held.Stop()
	held.Let(msgs[0].Receipt)
	const delay = 2 * time.Minute
	if err := q.ChangeVisibility(ctx, domain.QueuePool, msgs[0].Receipt, delay); err != nil {
		t.Fatal(err)
	}
	for range int(delay / (visibility / 3)) {
		clk.BlockUntil(1)
		clk.Advance(visibility / 3)
	}
	got, err := q.Receive(ctx, domain.QueuePool, 2, visibility, 0)
	if err != nil || len(got) != 1 || string(got[0].Body) != "retried" {
		t.Fatalf("after the delay received %d messages (%v), want the one let go alone", len(got), err)
	}
}
