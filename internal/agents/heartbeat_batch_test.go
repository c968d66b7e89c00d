package agents

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

func TestBatchedHeartbeatsAreWrittenByRun(t *testing.T) {
	w := testworld.New(t, time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	w.CreateInstance(domain.Instance{ID: "bp-1", CloudID: "i-1", State: domain.StateReady})
	s, err := New(w.Store, w.Queue, w.Clock, w.Log, nil, Options{HeartbeatFlush: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(w.Ctx, "i-1"); err != nil {
		t.Fatal(err)
	}
	beat := w.Clock.Now()
	if in := w.Instance("bp-1"); !in.Heartbeat.IsZero() {
		t.Fatal("a batched heartbeat was written at once")
	}
	stop := w.Run(s.Loop())
	w.Clock.BlockUntil(1)
	w.Clock.Advance(time.Second)
	w.Clock.BlockUntil(1) // the next flush is scheduled: the first one is written
	if in := w.Instance("bp-1"); !in.Heartbeat.Equal(beat) {
		t.Fatalf("heartbeat after a flush: %v, want %v", in.Heartbeat, beat)
	}
	if err := s.Heartbeat(w.Ctx, "i-1"); err != nil {
		t.Fatal(err)
	}
	last := w.Clock.Now()
	stop()
	if in := w.Instance("bp-1"); !in.Heartbeat.Equal(last) {
		t.Fatalf("heartbeats kept in memory were lost at shutdown: %v", in.Heartbeat)
	}
}
