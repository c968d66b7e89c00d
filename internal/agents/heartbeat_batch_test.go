package agents

import (
	"context"
	"errors"
	"slices"
	"strings"
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

// flakyHeartbeats is the real store whose heartbeat writes fail while
// failing is set; it records the batches it was given, and calls
// whileWriting, when set, during each write.
type flakyHeartbeats struct {
	Store
	failing      bool
	whileWriting func()
	batches      [][]domain.Heartbeat
}

func (s *flakyHeartbeats) RecordHeartbeats(ctx context.Context, beats []domain.Heartbeat) error {
	s.batches = append(s.batches, slices.Clone(beats))
	if s.whileWriting != nil {
		s.whileWriting()
	}
	if s.failing {
		return errors.New("store unavailable")
	}
	return s.Store.RecordHeartbeats(ctx, beats)
}

// Beats a flush could not write are written by the next one, unless a
// newer beat of the same instance replaced them.
func TestHeartbeatsAFlushCouldNotWriteAreKept(t *testing.T) {
	w := testworld.New(t, time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	w.CreateInstance(domain.Instance{ID: "bp-1", CloudID: "i-1", State: domain.StateReady})
	w.CreateInstance(domain.Instance{ID: "bp-2", CloudID: "i-2", State: domain.StateReady})
	store := &flakyHeartbeats{Store: w.Store, failing: true}
	s, err := New(store, w.Queue, w.Clock, w.Log, nil, Options{HeartbeatFlush: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	beat := func(cloudID string) {
		t.Helper()
		if err := s.Heartbeat(w.Ctx, cloudID); err != nil {
			t.Fatal(err)
		}
	}
	beat("i-1")
	beat("i-2")
	first := w.Clock.Now()
	var second time.Time
	store.whileWriting = func() { // a newer beat comes while the write fails
		w.Clock.Advance(time.Second)
		beat("i-1")
		second = w.Clock.Now()
	}
	if err := s.FlushHeartbeats(w.Ctx); err == nil {
		t.Fatal("a flush the store refused reported no error")
	}
	store.failing, store.whileWriting = false, nil
	if err := s.FlushHeartbeats(w.Ctx); err != nil {
		t.Fatal(err)
	}
	last := store.batches[len(store.batches)-1]
	slices.SortFunc(last, func(a, b domain.Heartbeat) int { return strings.Compare(a.ID, b.ID) })
	want := []domain.Heartbeat{{ID: "bp-1", At: second}, {ID: "bp-2", At: first}}
	if !slices.EqualFunc(last, want, func(a, b domain.Heartbeat) bool { return a.ID == b.ID && a.At.Equal(b.At) }) {
		t.Fatalf("the flush after a failed one wrote %v, want %v", last, want)
	}
	if in := w.Instance("bp-2"); !in.Heartbeat.Equal(first) {
		t.Fatalf("bp-2's heartbeat %v, want the one the failed flush kept (%v)", in.Heartbeat, first)
	}
	if err := s.FlushHeartbeats(w.Ctx); err != nil || len(store.batches) != 2 {
		t.Fatalf("a flush with nothing new: %v, %d batches in all, want 2", err, len(store.batches))
	}
}

// With a resolution, an agent beating every 5 s costs its row a write per
// resolution, and the row's heartbeat never lags the agent's by more.
func TestHeartbeatsWithinTheResolutionAreNotWritten(t *testing.T) {
	w := testworld.New(t, time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	w.CreateInstance(domain.Instance{ID: "bp-1", CloudID: "i-1", State: domain.StateReady})
	store := &flakyHeartbeats{Store: w.Store}
	const res = 30 * time.Second
	s, err := New(store, w.Queue, w.Clock, w.Log, nil, Options{HeartbeatFlush: time.Second, HeartbeatResolution: res})
	if err != nil {
		t.Fatal(err)
	}
	for range 13 { // a minute of beats every 5 s, each flushed
		if err := s.Heartbeat(w.Ctx, "i-1"); err != nil {
			t.Fatal(err)
		}
		if err := s.FlushHeartbeats(w.Ctx); err != nil {
			t.Fatal(err)
		}
		if lag := w.Clock.Now().Sub(w.Instance("bp-1").Heartbeat); lag >= res {
			t.Fatalf("the row's heartbeat lags by %s, want under %s", lag, res)
		}
		w.Clock.Advance(5 * time.Second)
	}
	if len(store.batches) != 3 {
		t.Fatalf("%d writes for a minute of beats, want 3: at 0, 30 and 60 s", len(store.batches))
	}
}
