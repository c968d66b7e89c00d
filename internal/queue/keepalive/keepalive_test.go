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

// holdTwo opens a store of its own, sends two messages, first and second,
// to its queue named queue, receives both and holds both.
func holdTwo(t *testing.T, queue, first, second string) (*clock.Virtual, domain.Queue, []domain.Message, keepalive.Held) {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	_, q := sqlitetest.Open(t, clk)
	if err := q.Send(ctx, queue, []domain.SendRequest{{Body: []byte(first)}, {Body: []byte(second)}}); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, queue, 2, visibility, 0)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %d, %v", len(msgs), err)
	}
	held := keepalive.Hold(q, clk, queue, []string{msgs[0].Receipt, msgs[1].Receipt}, visibility, slog.New(slog.DiscardHandler))
	return clk, q, msgs, held
}

func TestAHeldMessageStaysInvisibleUntilReleased(t *testing.T) {
	ctx := context.Background()
	clk, q, msgs, held := holdTwo(t, domain.QueueLaunch, "a", "b")
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
	clk, q, msgs, held := holdTwo(t, domain.QueuePool, "retried", "in hand")
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
