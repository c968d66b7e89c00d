package simagent_test

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/simagent"
)

func TestNeverWarmHoldsAcrossRestarts(t *testing.T) {
	w := newWorld(t, sim.Latency{Boot: 10 * sec}, simagent.Options{})
	ids := w.create(t, 2)
	w.fleet.NeverWarm(ids[0]) // before the machine runs
	w.advanceTo(20 * sec)
	wantTimes(t, "heartbeats", w.api.times(ids[0], "heartbeat"), every(10*sec, 20*sec, 5*sec))
	wantSignals(t, w.api.signals(t, ids[0]))
	wantTimes(t, "next", w.api.times(ids[0], "next"), nil)
	wantSignals(t, w.api.signals(t, ids[1]), "warm@10s")

	w.act(func() {
		if err := w.cloud.Stop(t.Context(), ids[:1]); err != nil {
			t.Fatal(err)
		}
		if err := w.cloud.Start(t.Context(), ids[:1]); err != nil {
			t.Fatal(err)
		}
	})
	w.advanceTo(40 * sec)
	wantSignals(t, w.api.signals(t, ids[0]))
}

func TestNeverWarmWhileWarmingUp(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{WarmUp: 10 * sec})
	id := w.create(t, 1)[0]
	w.advanceTo(5 * sec)
	w.fleet.NeverWarm(id)
	w.advanceTo(30 * sec)
	wantSignals(t, w.api.signals(t, id))
	if n := len(w.api.times(id, "heartbeat")); n != 7 {
		t.Fatalf("%d heartbeats, want 7: a never-warm agent is still alive", n)
	}
}

func TestNeverWarmEveryCountsMachinesInTheOrderTheyRun(t *testing.T) {
	w := newWorld(t, sim.Latency{Boot: sec}, simagent.Options{NeverWarmEvery: 2})
	ids := w.create(t, 4)
	w.advanceTo(2 * sec)
	for i, id := range ids {
		got := len(w.api.signals(t, id))
		if want := 1 - i%2; got != want { // the 2nd and 4th never warm
			t.Fatalf("machine %d sent %d signals, want %d", i, got, want)
		}
	}
}

func TestFailRegistration(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{})
	id := w.create(t, 1)[0]
	w.fleet.FailRegistration(id, "disk full")
	w.act(func() { w.assign(id, 5) })
	w.advanceTo(5 * sec)
	wantSignals(t, w.api.signals(t, id), "warm@0s", "failed@2s job=5 reason=disk full")
	wantTimes(t, "next", w.api.times(id, "next"), []time.Time{at(0), at(0), at(2 * sec), at(4 * sec)})
	if runs := w.host.all(); len(runs) != 0 {
		t.Fatalf("a runner started despite the failure: %+v", runs)
	}
}

func TestFailRegistrationEvery(t *testing.T) {
	w := newWorld(t, sim.Latency{Boot: sec}, simagent.Options{FailRegistrationEvery: 3, RegisterDelay: -1})
	ids := w.create(t, 3)
	for i, id := range ids {
		w.api.push(id, run(int64(i+1)))
	}
	w.advanceTo(2 * sec)
	wantSignals(t, w.api.signals(t, ids[0]), "warm@1s", "registered@1s job=1")
	wantSignals(t, w.api.signals(t, ids[1]), "warm@1s", "registered@1s job=2")
	wantSignals(t, w.api.signals(t, ids[2]), "warm@1s", "failed@1s job=3 reason="+simagent.InjectedRegistrationFailure)
}

func TestRunnerHostRefusesTheConfig(t *testing.T) {
	w := newWorld(t, sim.Latency{Boot: sec}, simagent.Options{RegisterDelay: -1})
	w.host.refuse["jit-9"] = true
	id := w.create(t, 1)[0]
	w.api.push(id, run(9))
	w.advanceTo(2 * sec)
	wantSignals(t, w.api.signals(t, id), "warm@1s", "failed@1s job=9 reason=start runner: invalid jit config")
	if st := w.fleet.Stats(); st.Signals[domain.SignalFailed] != 1 || st.Signals[domain.SignalRegistered] != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSilencedHeartbeats(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{RegisterDelay: -1})
	id := w.create(t, 1)[0]
	w.advanceTo(7 * sec)
	w.fleet.SilenceHeartbeats(id)
	w.act(func() { w.assign(id, 1) })
	w.advanceTo(30 * sec)
	wantTimes(t, "heartbeats", w.api.times(id, "heartbeat"), []time.Time{at(0), at(5 * sec)})
	wantSignals(t, w.api.signals(t, id), "warm@0s", "registered@7s job=1")
}

func TestCrashKillsTheAgentNotTheMachine(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{})
	id := w.create(t, 1)[0]
	w.advanceTo(7 * sec)
	if !w.fleet.Crash(id) {
		t.Fatal("Crash found no agent")
	}
	if w.fleet.Crash(id) || w.fleet.Crash("i-unknown") {
		t.Fatal("Crash found an agent where there is none")
	}
	if n := w.clk.Pending(); n != 0 {
		t.Fatalf("%d timers pending after the crash", n)
	}
	w.fleet.Assigned(id) // nobody listens
	w.advanceTo(30 * sec)
	wantTimes(t, "heartbeats", w.api.times(id, "heartbeat"), every(0, 5*sec, 5*sec))
	wantTimes(t, "next", w.api.times(id, "next"), every(0, 6*sec, 2*sec))
	if m, _ := w.cloud.Get(id); m.State != domain.CloudRunning {
		t.Fatalf("machine %s after its agent crashed", m.State)
	}

	// A restart brings a fresh agent.
	w.act(func() {
		if err := w.cloud.Stop(t.Context(), []string{id}); err != nil {
			t.Fatal(err)
		}
		if err := w.cloud.Start(t.Context(), []string{id}); err != nil {
			t.Fatal(err)
		}
	})
	w.advanceTo(31 * sec)
	wantSignals(t, w.api.signals(t, id), "warm@0s", "warm@30s")
}

func TestRegisterDelayFor(t *testing.T) {
	w := newWorld(t, sim.Latency{Boot: sec}, simagent.Options{})
	ids := w.create(t, 2)
	w.fleet.RegisterDelayFor(ids[0], 7*sec)
	w.fleet.RegisterDelayFor(ids[1], -1)
	w.api.push(ids[0], run(1))
	w.api.push(ids[1], run(2))
	w.advanceTo(10 * sec)
	wantSignals(t, w.api.signals(t, ids[0]), "warm@1s", "registered@8s job=1")
	wantSignals(t, w.api.signals(t, ids[1]), "warm@1s", "registered@1s job=2")
}
