package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func (e *env) heartbeat(id string, at time.Time) {
	e.t.Helper()
	if err := e.s.RecordHeartbeat(e.ctx, id, at); err != nil {
		e.t.Fatalf("heartbeat %s at %v: %v", id, at, err)
	}
}

// A heartbeat changes only Heartbeat: no version, no UpdatedAt, so that it
// never makes a concurrent guarded transition fail.
func testHeartbeatRecorded(t *testing.T, e *env) {
	in := instance("a", domain.StateBooting)
	in.Heartbeat = time.Time{}
	e.create(in)
	before := e.get("a")
	e.clk.Advance(5 * time.Second)
	at := e.clk.Now().Add(-17 * time.Microsecond).In(time.FixedZone("UTC+9", 9*60*60))
	e.heartbeat("a", at)

	want := before
	want.Heartbeat = at
	sameInstance(t, "instance after heartbeat", e.get("a"), want)
	// The version the caller read still guards.
	e.move("a", domain.GuardOf(before), to(domain.StateReady))
}

func testHeartbeatMonotonic(t *testing.T, e *env) {
	in := instance("a", domain.StateReady)
	in.Heartbeat = time.Time{}
	e.create(in)
	steps := []struct {
		at, want time.Time
	}{
		{start.Add(10 * time.Second), start.Add(10 * time.Second)},
		{start.Add(20 * time.Second), start.Add(20 * time.Second)},
		{start.Add(15 * time.Second), start.Add(20 * time.Second)}, // delivered late
		{start.Add(20 * time.Second), start.Add(20 * time.Second)},
		{start.Add(20*time.Second + time.Microsecond), start.Add(20*time.Second + time.Microsecond)},
	}
	for k, s := range steps {
		e.heartbeat("a", s.at)
		if got := e.get("a").Heartbeat; !got.Equal(s.want) {
			t.Fatalf("step %d: heartbeat %v, want %v", k, got, s.want)
		}
	}
}

func testHeartbeatUnknown(t *testing.T, e *env) {
	if err := e.s.RecordHeartbeat(e.ctx, "ghost", start); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	instanceRows.empty(t, e, "heartbeat of a missing instance")
}

func testHeartbeatThroughTransition(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady))
	at := start.Add(3 * time.Second)
	e.heartbeat("a", at)
	e.clk.Advance(time.Second)
	got := e.move("a", readyUnbound, claim("job-1"))
	if !got.Heartbeat.Equal(at) || !e.get("a").Heartbeat.Equal(at) {
		t.Fatalf("heartbeat after transition: returned %v, stored %v; want %v", got.Heartbeat, e.get("a").Heartbeat, at)
	}
}

// A batch keeps the latest heartbeat of each instance, ignores instances
// that are gone, and changes nothing else.
func testHeartbeatsBatch(t *testing.T, e *env) {
	for _, id := range []string{"a", "b"} {
		in := instance(id, domain.StateReady)
		in.Heartbeat = time.Time{}
		e.create(in)
	}
	before := e.get("a")
	e.heartbeat("b", start.Add(time.Minute))
	err := e.s.RecordHeartbeats(e.ctx, []domain.Heartbeat{
		{ID: "a", At: start.Add(10 * time.Second)},
		{ID: "b", At: start.Add(30 * time.Second)}, // older than b's: ignored
		{ID: "ghost", At: start.Add(10 * time.Second)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := before
	want.Heartbeat = start.Add(10 * time.Second)
	sameInstance(t, "a after the batch", e.get("a"), want)
	if got := e.get("b").Heartbeat; !got.Equal(start.Add(time.Minute)) {
		t.Fatalf("b's heartbeat went back to %v", got)
	}
	if err := e.s.RecordHeartbeats(e.ctx, nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	if got := e.list(domain.InstanceFilter{}); len(got) != 2 {
		t.Fatalf("a batch created rows: %v", ids(got))
	}
}
