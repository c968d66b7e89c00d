package sim_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// attempt is one signal offered to the sink and whether it took it.
type attempt struct {
	domain.Signal
	accepted bool
}

// sink records every signal offered and refuses the first refuse of them,
// as a control plane does before it has recorded a machine's cloud id.
type sink struct {
	mu       sync.Mutex
	refuse   int
	attempts chan attempt
}

func newSink(refuse int) *sink { return &sink{refuse: refuse, attempts: make(chan attempt, 4096)} }

func (s *sink) Signal(_ context.Context, sig domain.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := attempt{Signal: sig, accepted: s.refuse == 0}
	if s.refuse > 0 {
		s.refuse--
	}
	select {
	case s.attempts <- a:
	default: // a test that floods the sink does not read attempts
	}
	if !a.accepted {
		return errors.New("cloud id not recorded yet")
	}
	return nil
}

// next waits for the next attempt; the clock has fired its timer already,
// so only the goroutine that delivers it is outstanding.
func (s *sink) next(t *testing.T) attempt {
	t.Helper()
	select {
	case a := <-s.attempts:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no signal delivered")
		return attempt{}
	}
}

func wantAttempt(t *testing.T, a attempt, id string, at time.Time, accepted bool) {
	t.Helper()
	if a.CloudID != id || a.Kind != domain.SignalWarm || !a.At.Equal(at) || a.accepted != accepted {
		t.Fatalf("signal %+v, want warm from %s at %v (accepted %v)", a, id, at, accepted)
	}
}

// wantNextTimer asserts the sim's next pending signal is due at want.
func wantNextTimer(t *testing.T, next func() (time.Time, bool), want time.Time) {
	t.Helper()
	if got, ok := next(); !ok || !got.Equal(want) {
		t.Fatalf("next signal due %v (pending %v), want %v", got, ok, want)
	}
}

func TestWarmSignalOncePerBootAndStart(t *testing.T) {
	s := newSink(0)
	lat := sim.Latency{Boot: 30 * time.Second, Start: 20 * time.Second, Stop: 10 * time.Second, WarmUp: 15 * time.Second}
	c, clk := newSim(t, sim.Options{Latency: lat, Signals: s})
	ctx := t.Context()
	id := create(t, c, 1, nil)[0]

	warm := epoch.Add(lat.Boot + lat.WarmUp)
	wantNextTimer(t, clk.Next, warm)
	clk.AdvanceTo(warm.Add(-time.Nanosecond))
	wantNextTimer(t, clk.Next, warm)
	clk.Advance(time.Nanosecond)
	wantAttempt(t, s.next(t), id, warm, true)
	if clk.Pending() != 0 {
		t.Fatalf("%d timers pending after an accepted signal", clk.Pending())
	}

	clk.Advance(time.Minute)
	if err := c.Stop(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(lat.Stop)
	startedAt := clk.Now()
	if err := c.Start(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	rewarm := startedAt.Add(lat.Start + lat.WarmUp)
	wantNextTimer(t, clk.Next, rewarm)
	clk.AdvanceTo(rewarm.Add(time.Hour))
	wantAttempt(t, s.next(t), id, rewarm, true)
	if clk.Pending() != 0 || len(s.attempts) != 0 {
		t.Fatalf("extra signals: %d pending, %d delivered", clk.Pending(), len(s.attempts))
	}
}

func TestWarmSignalRetriedUntilAccepted(t *testing.T) {
	s := newSink(2)
	lat := sim.Latency{Boot: 10 * time.Second, WarmUp: 5 * time.Second}
	c, clk := newSim(t, sim.Options{Latency: lat, Signals: s, SignalRetry: 3 * time.Second})
	id := create(t, c, 1, nil)[0]
	warm := epoch.Add(lat.Boot + lat.WarmUp)

	clk.AdvanceTo(warm)
	wantAttempt(t, s.next(t), id, warm, false)
	clk.BlockUntil(1)
	wantNextTimer(t, clk.Next, warm.Add(3*time.Second))
	clk.Advance(3 * time.Second)
	wantAttempt(t, s.next(t), id, warm.Add(3*time.Second), false)
	clk.BlockUntil(1)
	clk.Advance(3 * time.Second)
	wantAttempt(t, s.next(t), id, warm.Add(6*time.Second), true)
	if clk.Pending() != 0 {
		t.Fatalf("%d timers pending after an accepted signal", clk.Pending())
	}
}

func TestWarmSignalRetriesStopWhenMachineLeavesRunning(t *testing.T) {
	s := newSink(1000)
	c, clk := newSim(t, sim.Options{Latency: sim.Latency{WarmUp: time.Minute}, Signals: s})
	id := create(t, c, 1, nil)[0]
	clk.Advance(time.Minute)
	wantAttempt(t, s.next(t), id, epoch.Add(time.Minute), false)
	clk.BlockUntil(1)
	if err := c.Stop(t.Context(), []string{id}); err != nil {
		t.Fatal(err)
	}
	if clk.Pending() != 0 {
		t.Fatalf("%d timers pending after stop", clk.Pending())
	}
}

func TestNoWarmSignalWhenStoppedBeforeWarmUpEnds(t *testing.T) {
	s := newSink(0)
	lat := sim.Latency{WarmUp: time.Minute}
	c, clk := newSim(t, sim.Options{Latency: lat, Signals: s})
	ids := create(t, c, 2, nil)
	clk.Advance(30 * time.Second)
	if err := c.Terminate(t.Context(), ids[:1]); err != nil {
		t.Fatal(err)
	}
	wantNextTimer(t, clk.Next, epoch.Add(lat.WarmUp))
	if clk.Pending() != 1 {
		t.Fatalf("%d timers pending, want only the survivor's", clk.Pending())
	}
	clk.Advance(time.Hour)
	wantAttempt(t, s.next(t), ids[1], epoch.Add(lat.WarmUp), true)
}

func TestNeverWarmMachines(t *testing.T) {
	s := newSink(0)
	lat := sim.Latency{Boot: time.Second, WarmUp: time.Second}
	c, clk := newSim(t, sim.Options{Latency: lat, Signals: s, NeverWarmEvery: 2})
	ids := create(t, c, 4, nil) // the 2nd and 4th never warm
	if clk.Pending() != 2 {
		t.Fatalf("%d signals scheduled, want 2", clk.Pending())
	}
	if !c.NeverWarm(ids[2]) || c.NeverWarm("i-unknown") {
		t.Fatal("NeverWarm did not report the machine it knows")
	}
	if clk.Pending() != 1 {
		t.Fatalf("%d signals scheduled after NeverWarm, want 1", clk.Pending())
	}
	clk.Advance(time.Hour)
	wantAttempt(t, s.next(t), ids[0], epoch.Add(2*time.Second), true)

	// A never-warm machine stays silent across restarts too.
	if err := c.Stop(t.Context(), ids[1:2]); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context(), ids[1:2]); err != nil {
		t.Fatal(err)
	}
	if clk.Pending() != 0 {
		t.Fatalf("%d signals scheduled for a never-warm machine", clk.Pending())
	}
}

func TestCloseStopsAgents(t *testing.T) {
	c, clk := newSim(t, sim.Options{Latency: sim.Latency{WarmUp: time.Minute}, Signals: newSink(0)})
	create(t, c, 3, nil)
	c.Close()
	if clk.Pending() != 0 {
		t.Fatalf("%d timers pending after Close", clk.Pending())
	}
}
