package clock

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var epoch = time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC)

func TestVirtualFiresInOrderAsTimePasses(t *testing.T) {
	v := NewVirtual(epoch)
	a := v.After(2 * time.Second)
	b := v.After(1 * time.Second)
	v.Advance(500 * time.Millisecond)
	select {
	case <-a:
		t.Fatal("a fired early")
	case <-b:
		t.Fatal("b fired early")
	default:
	}
	v.Advance(2 * time.Second)
	if got := <-b; !got.Equal(epoch.Add(time.Second)) {
		t.Fatalf("b fired at %v", got)
	}
	if got := <-a; !got.Equal(epoch.Add(2 * time.Second)) {
		t.Fatalf("a fired at %v", got)
	}
	if !v.Now().Equal(epoch.Add(2500 * time.Millisecond)) {
		t.Fatalf("now = %v", v.Now())
	}
}

func TestVirtualStopAndAfterFunc(t *testing.T) {
	v := NewVirtual(epoch)
	var calls atomic.Int32
	done := make(chan struct{})
	stopped := v.AfterFunc(time.Second, func() { calls.Add(1) })
	v.AfterFunc(time.Second, func() { calls.Add(1); close(done) })
	if !stopped.Stop() {
		t.Fatal("Stop on a pending timer reported false")
	}
	if stopped.Stop() {
		t.Fatal("second Stop reported true")
	}
	if v.Pending() != 1 {
		t.Fatalf("pending = %d", v.Pending())
	}
	v.Advance(time.Second)
	<-done
	if calls.Load() != 1 {
		t.Fatalf("calls = %d", calls.Load())
	}
}

func TestVirtualBlockUntilSeesAWaiter(t *testing.T) {
	v := NewVirtual(epoch)
	got := make(chan time.Time)
	go func() { got <- <-v.After(time.Minute) }()
	v.BlockUntil(1)
	v.Advance(time.Minute)
	if at := <-got; !at.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("fired at %v", at)
	}
	if _, ok := v.Next(); ok {
		t.Fatal("timer still pending")
	}
}

func TestVirtualZeroDurationFiresNow(t *testing.T) {
	v := NewVirtual(epoch)
	if got := <-v.After(0); !got.Equal(epoch) {
		t.Fatalf("fired at %v", got)
	}
}

func TestScaledRunsFaster(t *testing.T) {
	s := NewScaled(epoch, 3600)
	<-s.After(6 * time.Minute) // a tenth of a real second
	if s.Now().Sub(epoch) < 6*time.Minute {
		t.Fatalf("scaled clock at %v after a six-minute timer", s.Now())
	}
}

func TestVirtualSettleWaitsForCallbacksAndTheirChildren(t *testing.T) {
	v := NewVirtual(epoch)
	var done atomic.Int32
	v.AfterFunc(time.Second, func() {
		v.AfterFunc(0, func() { done.Add(1) })
		done.Add(1)
	})
	v.Advance(time.Second)
	v.Settle()
	if done.Load() != 2 {
		t.Fatalf("settled with %d of 2 callbacks done", done.Load())
	}
}

// Each timer of a chain is set by the callback of the one before: Pass
// fires every one at its own instant, not all at the end of the span.
func TestVirtualPassFiresChainsAtTheirInstants(t *testing.T) {
	v := NewVirtual(epoch)
	var mu sync.Mutex
	var fired []time.Duration
	var tick func()
	tick = func() {
		mu.Lock()
		fired = append(fired, v.Now().Sub(epoch))
		mu.Unlock()
		v.AfterFunc(time.Second, tick)
	}
	v.AfterFunc(time.Second, tick)
	v.Pass(3*time.Second + time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}; !slices.Equal(fired, want) {
		t.Fatalf("fired at %v, want %v", fired, want)
	}
	if now := v.Now().Sub(epoch); now != 3*time.Second+time.Millisecond {
		t.Fatalf("clock at %v after the pass", now)
	}
}
