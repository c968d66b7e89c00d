package simulate_test

import (
	"context"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/demo"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

// slowT3 are timings under which a t3 instance takes longer to warm than
// the control plane allows a launch: small-x64's cold starts never serve
// a job, and its jobs the warm pool does not take stay queued.
func slowT3() map[string]sim.Latency {
	slow := demo.DefaultLatency
	slow.Boot, slow.WarmUp = 4*time.Minute, 2*time.Minute
	return map[string]sim.Latency{"t3": slow}
}

// Jobs no runner took by the replay's end count as waiting until then,
// by pool and hour: left out, they made a configuration too small to
// start them read as fast as one that served them all.
func TestJobsThatNeverStartCountAsWaitingUntilTheEnd(t *testing.T) {
	rep, err := simulate.Run(context.Background(), simulate.Options{Config: example(t), Jobs: burst("small-x64", "dev"),
		Seed: 1, FamilyLatency: slowT3()})
	if err != nil {
		t.Fatal(err)
	}
	w := rep.Waits
	queued := rep.Simulated.NotStarted["queued"] + rep.Simulated.NotStarted["assigned"]
	if queued == 0 || w.All.NotStarted != queued {
		t.Fatalf("%d jobs not started, the jobs report says %v: want the same, and some", w.All.NotStarted, rep.Simulated.NotStarted)
	}
	if w.All.Count != rep.Simulated.QueueTime.Count+queued || w.Pools.Count != w.All.Count {
		t.Errorf("counted %d jobs (%d of pools): want the %d served and the %d not started", w.All.Count, w.Pools.Count,
			rep.Simulated.QueueTime.Count, queued)
	}
	if p := w.ByPool["small-x64"]; p.NotStarted != queued || p.Count != w.All.Count {
		t.Errorf("pool small-x64: %+v, want all %d jobs, %d not started", p, w.All.Count, queued)
	}
	notStarted := 0
	for _, l := range w.ByPoolHour["small-x64"] {
		notStarted += l.NotStarted
	}
	if notStarted != queued {
		t.Errorf("the pool's hours count %d jobs not started, want %d", notStarted, queued)
	}
	last := rep.Window.From
	for _, j := range burst("small-x64", "dev") {
		last = j.Created
	}
	if waited := rep.Run.To.Sub(last).Seconds(); w.All.Max < waited || w.All.P90 <= rep.Simulated.QueueTime.P90 {
		t.Errorf("queue times %+v, the served jobs' %+v: want the jobs not started waiting at least %.0f s, to the replay's end",
			w.All.Latencies, rep.Simulated.QueueTime, waited)
	}
}

// An hour whose jobs did not all start misses any target: its jobs
// waited longer than the replay let them, whatever the p90 of the others.
func TestSuggestCountsAnHourWithJobsNotStartedAsMissed(t *testing.T) {
	if testing.Short() {
		t.Skip("several replays")
	}
	s, err := simulate.Suggest(context.Background(), simulate.SuggestOptions{
		Options:   simulate.Options{Config: example(t), Jobs: burst("small-x64", "dev"), Seed: 1, FamilyLatency: slowT3()},
		TargetP90: 24 * time.Hour, Rounds: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	first := s.Rounds[0]
	if first.PoolNotStarted == 0 {
		t.Fatalf("round 1 %+v: want jobs not started, for the test to hold", first)
	}
	if first.Missed == 0 || s.Met && len(s.Rounds) == 1 {
		t.Errorf("round 1 %+v: %d jobs did not start, yet no pool-hour missed the target", first, first.PoolNotStarted)
	}
	if last := s.Rounds[len(s.Rounds)-1]; s.Met != (last.Missed == 0) || (s.Met && last.PoolNotStarted > 0) {
		t.Errorf("met %v with the last round %+v", s.Met, last)
	}
}

// The search's p90 is every pool job's: with no warm instance, every job
// of the pool starts cold, and the p90 is theirs, not 0.
func TestSuggestsPoolP90CountsTheColdOverflow(t *testing.T) {
	cfg := example(t)
	rep, err := simulate.Run(context.Background(), simulate.Options{Config: cfg, Jobs: burst("small-x64", "dev"), Seed: 1, Lead: -1})
	if err != nil {
		t.Fatal(err)
	}
	cold := rep.Simulated.QueueTimes["cold"]
	if cold.Count == 0 {
		t.Fatalf("no cold start in the replay: %+v", rep.Simulated.QueueTimes)
	}
	if rep.Waits.Pools.Count != rep.Simulated.QueueTime.Count || rep.Waits.Pools.P90 < rep.Simulated.QueueTimes["pool"].P90 {
		t.Errorf("pool jobs %+v, served %+v by way %+v: want every pool job, the cold starts included", rep.Waits.Pools,
			rep.Simulated.QueueTime, rep.Simulated.QueueTimes)
	}
	if rep.Waits.All.Latencies != rep.Simulated.QueueTime {
		t.Errorf("every job started, yet the queue times %+v differ from the served jobs' %+v", rep.Waits.All.Latencies, rep.Simulated.QueueTime)
	}
}
