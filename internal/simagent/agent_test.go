package simagent_test

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/simagent"
)

func TestHeartbeatsWarmAndFirstAskAtExactTimes(t *testing.T) {
	w := newWorld(t, sim.Latency{Boot: 30 * sec}, simagent.Options{WarmUp: 20 * sec})
	id := w.create(t, 1)[0]
	w.clk.Pass(30*sec - time.Nanosecond)
	if got := w.api.of(id, ""); len(got) != 0 {
		t.Fatalf("agent active before its machine runs: %+v", got)
	}
	w.advanceTo(61 * sec)
	wantTimes(t, "heartbeats", w.api.times(id, "heartbeat"), every(30*sec, 60*sec, 5*sec))
	wantSignals(t, w.api.signals(t, id), "warm@50s")
	wantTimes(t, "next", w.api.times(id, "next"), every(50*sec, 60*sec, 2*sec))
	st := w.fleet.Stats()
	if st.Runs != 1 || st.Heartbeats != 7 || st.Signals[domain.SignalWarm] != 1 || st.NextCalls != 6 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNotificationWakesAWaitingAgentAtOnce(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{})
	id := w.create(t, 1)[0]
	w.advanceTo(10*sec + 500*time.Millisecond)
	wantTimes(t, "polls", w.api.times(id, "next"), every(0, 10*sec, 2*sec))

	w.act(func() { w.assign(id, 42) })
	w.advanceTo(13 * sec)
	w.fleet.Assigned(id) // serving: nothing to wake
	w.advanceTo(20 * sec)
	wantTimes(t, "next", w.api.times(id, "next"), append(every(0, 10*sec, 2*sec), at(10*sec+500*time.Millisecond)))
	runs := w.host.all()
	if len(runs) != 1 || runs[0].jit != "jit-42" || !runs[0].at.Equal(at(12*sec+500*time.Millisecond)) {
		t.Fatalf("runner runs %+v, want jit-42 at 12.5s", runs)
	}
	wantSignals(t, w.api.signals(t, id), "warm@0s", "registered@12.5s job=42")
}

func TestPollingPicksUpAnInstructionWithoutNotification(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{PollEvery: 3 * sec, RegisterDelay: -1})
	id := w.create(t, 1)[0]
	w.advanceTo(4 * sec)
	w.api.push(id, run(1))
	w.advanceTo(10 * sec)
	wantTimes(t, "next", w.api.times(id, "next"), []time.Time{at(0), at(3 * sec), at(6 * sec)})
	wantSignals(t, w.api.signals(t, id), "warm@0s", "registered@6s job=1")
}

// A notification that comes while a Next call is on its way (after the
// control plane answered wait, before the agent heard it) is not lost: the
// agent asks again at once.
func TestNotificationDuringNextIsNotLost(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{})
	id := w.create(t, 1)[0]
	w.advanceTo(3 * sec)
	assigned := false // Next calls of one agent never overlap
	w.api.onNext = func(cloudID string, ins domain.Instruction) {
		if ins.Kind == domain.InstructionWait && w.clk.Now().Equal(at(4*sec)) && !assigned {
			assigned = true
			w.assign(cloudID, 7)
		}
	}
	w.advanceTo(10 * sec)
	wantTimes(t, "next", w.api.times(id, "next"), []time.Time{at(0), at(2 * sec), at(4 * sec), at(4 * sec)})
	wantSignals(t, w.api.signals(t, id), "warm@0s", "registered@6s job=7")
}

// The whole reuse loop: run, registered, job started and finished, release,
// deregistered, and the next job on the same machine.
func TestJobLoopReusesTheMachine(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{})
	id := w.create(t, 1)[0]
	w.api.onSignal = func(s domain.Signal) {
		if s.Kind == domain.SignalJobFinished {
			w.api.push(s.CloudID, release)
		}
	}
	assign := func(job int64) {
		w.act(func() { w.assign(id, job) })
	}
	w.advanceTo(1 * sec)
	assign(1)
	w.advanceTo(10 * sec)
	w.act(func() { w.host.all()[0].onStart(1) })
	w.advanceTo(40 * sec)
	w.act(func() { w.host.all()[0].onDone(1, "success") })
	w.advanceTo(44 * sec)
	assign(2)
	w.advanceTo(50 * sec)
	w.act(func() { w.host.all()[1].onStart(2) })
	w.advanceTo(60 * sec)

	wantSignals(t, w.api.signals(t, id),
		"warm@0s", "registered@3s job=1", "job-started@10s job=1", "job-finished@40s job=1 reason=runner exited (job success)",
		"deregistered@41s", "registered@46s job=2", "job-started@50s job=2")
	wantTimes(t, "next", w.api.times(id, "next"),
		[]time.Time{at(0), at(1 * sec), at(40 * sec), at(41 * sec), at(43 * sec), at(44 * sec)})
	runs := w.host.all()
	if len(runs) != 2 || runs[0].jit != "jit-1" || runs[1].jit != "jit-2" {
		t.Fatalf("runner runs %+v", runs)
	}
	if runs[0].ctx.Err() == nil || runs[1].ctx.Err() != nil {
		t.Fatal("want the released runner's process ended, the serving one's alive")
	}
	// Repeated or late callbacks of a finished runner change nothing.
	w.act(func() {
		runs[0].onDone(1, "success")
		runs[0].onStart(1)
	})
	if n := len(w.api.of(id, "signal")); n != 7 {
		t.Fatalf("%d signals after stale callbacks, want 7", n)
	}
	st := w.fleet.Stats()
	if st.Signals[domain.SignalRegistered] != 2 || st.Signals[domain.SignalDeregistered] != 1 || st.Runs != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHaltMidJobStopsEverything(t *testing.T) {
	w := newWorld(t, sim.Latency{Stop: 5 * sec}, simagent.Options{})
	id := w.create(t, 1)[0]
	w.act(func() { w.assign(id, 1) })
	w.advanceTo(10 * sec)
	r := w.host.all()[0]
	w.act(func() { r.onStart(1) })
	w.advanceTo(20 * sec)
	w.act(func() {
		if err := w.cloud.Stop(t.Context(), []string{id}); err != nil {
			t.Fatal(err)
		}
	})
	if r.ctx.Err() == nil {
		t.Fatal("the runner's context outlived its machine")
	}
	if n := w.clk.Pending(); n != 0 {
		t.Fatalf("%d timers pending after the halt", n)
	}
	w.act(func() { r.onDone(1, "failure") })
	w.advanceTo(120 * sec)
	wantSignals(t, w.api.signals(t, id), "warm@0s", "registered@2s job=1", "job-started@10s job=1")
	wantTimes(t, "heartbeats", w.api.times(id, "heartbeat"), every(0, 20*sec, 5*sec))
}

func TestStopAndStartRunsAFreshAgent(t *testing.T) {
	w := newWorld(t, sim.Latency{Start: 10 * sec, Stop: 5 * sec}, simagent.Options{WarmUp: 3 * sec})
	id := w.create(t, 1)[0]
	w.advanceTo(6 * sec)
	w.act(func() {
		if err := w.cloud.Stop(t.Context(), []string{id}); err != nil {
			t.Fatal(err)
		}
	})
	w.advanceTo(20 * sec)
	w.act(func() {
		if err := w.cloud.Start(t.Context(), []string{id}); err != nil {
			t.Fatal(err)
		}
	})
	w.advanceTo(40 * sec)
	wantTimes(t, "heartbeats", w.api.times(id, "heartbeat"),
		[]time.Time{at(0), at(5 * sec), at(30 * sec), at(35 * sec), at(40 * sec)})
	wantSignals(t, w.api.signals(t, id), "warm@3s", "warm@33s")
	wantTimes(t, "next", w.api.times(id, "next"),
		[]time.Time{at(3 * sec), at(5 * sec), at(33 * sec), at(35 * sec), at(37 * sec), at(39 * sec)})
	if st := w.fleet.Stats(); st.Runs != 2 {
		t.Fatalf("%d runs, want 2", st.Runs)
	}
}

func TestRefusedSignalsAreRetriedInOrder(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{})
	w.api.setRefuse(domain.SignalWarm, 2)
	w.api.setRefuse(domain.SignalRegistered, 2)
	// GitHub hands the job over before RunJIT even returns.
	w.host.onRun = func(r *hostRun) { r.onStart(9) }
	id := w.create(t, 1)[0]
	w.advanceTo(3 * sec)
	w.act(func() { w.assign(id, 9) })
	w.advanceTo(10 * sec)
	wantSignals(t, w.api.signals(t, id),
		"warm@0s !", "warm@1s !", "warm@2s",
		"registered@5s job=9 !", "registered@6s job=9 !", "registered@7s job=9", "job-started@7s job=9")
	wantTimes(t, "next", w.api.times(id, "next"), []time.Time{at(2 * sec), at(3 * sec)})
	st := w.fleet.Stats()
	if st.Refused[domain.SignalWarm] != 2 || st.Refused[domain.SignalRegistered] != 2 || st.Signals[domain.SignalJobStarted] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRunnerCallbacksDuringRunJITKeepTheirOrder(t *testing.T) {
	w := newWorld(t, sim.Latency{Boot: sec}, simagent.Options{RegisterDelay: -1})
	w.host.onRun = func(r *hostRun) {
		r.onStart(3)
		r.onDone(3, "cancelled")
	}
	id := w.create(t, 1)[0]
	w.api.push(id, run(3))
	w.advanceTo(4 * sec)
	wantSignals(t, w.api.signals(t, id),
		"warm@1s", "registered@1s job=3", "job-started@1s job=3", "job-finished@1s job=3 reason=runner exited (job cancelled)")
	wantTimes(t, "next", w.api.times(id, "next"), []time.Time{at(sec), at(sec), at(3 * sec)})
}

// GitHub names no job when a runner is removed before or during its job;
// the report is for the job the agent was assigned.
func TestRunnerEndingWithoutAJobReportsTheAssignedOne(t *testing.T) {
	w := newWorld(t, sim.Latency{Boot: sec}, simagent.Options{RegisterDelay: -1})
	id := w.create(t, 1)[0]
	w.api.push(id, run(12))
	w.advanceTo(2 * sec)
	w.act(func() { w.host.all()[0].onDone(0, "") })
	wantSignals(t, w.api.signals(t, id), "warm@1s", "registered@1s job=12", "job-finished@2s job=12 reason=runner exited")
}

func TestNextErrorsAreRetried(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{RetryEvery: 500 * time.Millisecond})
	w.api.failNext = 2
	id := w.create(t, 1)[0]
	w.advanceTo(4 * sec)
	wantTimes(t, "next", w.api.times(id, "next"),
		[]time.Time{at(0), at(500 * time.Millisecond), at(sec), at(3 * sec)})
}

func TestRetriesStopWhenTheMachineHalts(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{})
	w.api.setRefuse(domain.SignalWarm, -1)
	id := w.create(t, 1)[0]
	w.advanceTo(2 * sec)
	w.act(func() {
		if err := w.cloud.Terminate(t.Context(), []string{id}); err != nil {
			t.Fatal(err)
		}
	})
	if n := w.clk.Pending(); n != 0 {
		t.Fatalf("%d timers pending after terminate", n)
	}
	w.advanceTo(10 * sec)
	wantSignals(t, w.api.signals(t, id), "warm@0s !", "warm@1s !", "warm@2s !")
}

func TestCloseKillsEveryAgent(t *testing.T) {
	w := newWorld(t, sim.Latency{}, simagent.Options{})
	ids := w.create(t, 3)
	w.advanceTo(sec)
	w.fleet.Close()
	if n := w.clk.Pending(); n != 0 {
		t.Fatalf("%d timers pending after Close", n)
	}
	w.act(func() {
		if err := w.cloud.Stop(t.Context(), ids); err != nil {
			t.Fatal(err)
		}
		if err := w.cloud.Start(t.Context(), ids); err != nil {
			t.Fatal(err)
		}
	})
	w.advanceTo(10 * sec)
	if st := w.fleet.Stats(); st.Runs != 3 {
		t.Fatalf("%d runs, want the 3 before Close", st.Runs)
	}
}
