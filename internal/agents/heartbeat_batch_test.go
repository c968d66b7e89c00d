package agents

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/loop/looptest"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

func TestBatchedHeartbeatsAreWrittenByRun(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewVirtual(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	st, _ := sqlitetest.Open(t, clk)
	if err := st.CreateInstances(ctx, []domain.Instance{{ID: "bp-1", CloudID: "i-1", State: domain.StateReady}}); err != nil {
		t.Fatal(err)
	}
	s, err := New(st, st.Queue(sqlite.QueueOptions{}), clk, slog.New(slog.NewTextHandler(io.Discard, nil)), nil,
		Options{HeartbeatFlush: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "i-1"); err != nil {
		t.Fatal(err)
	}
	beat := clk.Now()
	if in, _ := st.GetInstance(ctx, "bp-1"); !in.Heartbeat.IsZero() {
		t.Fatal("a batched heartbeat was written at once")
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- looptest.Run(runCtx, clk, s.Loop()) }()
	clk.BlockUntil(1)
	clk.Advance(time.Second)
	clk.BlockUntil(1) // the next flush is scheduled: the first one is written
	if in, _ := st.GetInstance(ctx, "bp-1"); !in.Heartbeat.Equal(beat) {
		t.Fatalf("heartbeat after a flush: %v, want %v", in.Heartbeat, beat)
	}
	if err := s.Heartbeat(ctx, "i-1"); err != nil {
		t.Fatal(err)
	}
	last := clk.Now()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if in, _ := st.GetInstance(ctx, "bp-1"); !in.Heartbeat.Equal(last) {
		t.Fatalf("heartbeats kept in memory were lost at shutdown: %v", in.Heartbeat)
	}
}
