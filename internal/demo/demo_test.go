package demo

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/examples"
	"github.com/bullpen-ci/bullpen/internal/config"
)

func exampleConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse("examples/runs-on.yml", examples.RunsOn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A Monday morning in Paris: small-x64's default entry (hot 1, stopped 2).
var monday = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func TestDemoReachesEveryTargetAndRollsOnANewImage(t *testing.T) {
	var lines bytes.Buffer
	res, err := Run(context.Background(), Options{
		Config: exampleConfig(t), Duration: 10 * time.Minute, Start: monday, RollAt: 5 * time.Minute,
		Latency: DefaultLatency, StorePath: t.TempDir() + "/demo.db", Lines: &lines,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.AllAtGoal {
		t.Fatalf("not every pool at target: %+v\n%s", res.Pools, lines.String())
	}
	for _, p := range res.Pools {
		if !p.Rolled {
			t.Errorf("pool %s still has instances of the old spec", p.Name)
		}
	}
	small := res.Pools[len(res.Pools)-1]
	if small.Name != "small-x64" || small.Schedule != "default" || small.ReadyHot != 1 || small.Stopped != 2 {
		t.Fatalf("small-x64 = %+v", small)
	}
	out := lines.String()
	// The roll takes old instances out before new ones come in, in one cycle.
	if !strings.Contains(out, "terminate 3 (outdated), create 1 hot, create 2 stopped") {
		t.Errorf("no roll of small-x64 in the output:\n%s", out)
	}
	if res.Virtual != "10m0s" || res.Cycles != 20 || res.Interrupted {
		t.Errorf("ran %s in %d cycles, interrupted %v", res.Virtual, res.Cycles, res.Interrupted)
	}
	if got := res.CloudCalls["TerminateInstances"]; got != len(res.Pools) {
		t.Errorf("TerminateInstances calls = %d, want one per rolled pool", got)
	}
}

func TestDemoServesJobsThreeWaysAndEndsAtTarget(t *testing.T) {
	var lines bytes.Buffer
	res, err := Run(context.Background(), Options{
		Config: exampleConfig(t), Duration: 15 * time.Minute, Start: monday, JobsPerMinute: 8, Seed: 7,
		Latency: DefaultLatency, StorePath: t.TempDir() + "/demo.db", Lines: &lines,
	})
	if err != nil {
		t.Fatal(err)
	}
	j := res.Jobs
	if j.Total < 40 {
		t.Fatalf("only %d jobs fed", j.Total)
	}
	for _, st := range []string{"queued", "assigned", "rejected"} {
		if j.ByStatus[st] != 0 {
			t.Errorf("%d jobs still %s at the end: %+v", j.ByStatus[st], st, j.ByStatus)
		}
	}
	if j.ByStatus["completed"]+j.ByStatus["running"] != j.Total {
		t.Errorf("jobs lost: %+v of %d", j.ByStatus, j.Total)
	}
	pool, reuse, cold := j.QueueTimes["pool"], j.QueueTimes["reuse"], j.QueueTimes["cold"]
	if pool.Count == 0 || reuse.Count == 0 || cold.Count == 0 {
		t.Fatalf("every way of serving a job must show: %+v", j.QueueTimes)
	}
	if !(pool.P50 < cold.P50 && reuse.P50 < cold.P50) {
		t.Errorf("warm capacity must start jobs sooner than a cold start: %+v", j.QueueTimes)
	}
	if !res.AllAtGoal {
		t.Errorf("pools not back at target after the jobs stopped: %+v\n%s", res.Pools, lines.String())
	}
	if !strings.Contains(lines.String(), "jobs: ") {
		t.Errorf("no jobs line in the output")
	}
}

func TestDemoFollowsTheScheduleAtNight(t *testing.T) {
	// 23:00 in Paris on a Tuesday: nights applies to small-x64 (hot 0, stopped 2).
	res, err := Run(context.Background(), Options{
		Config: exampleConfig(t), Duration: 5 * time.Minute, Start: time.Date(2026, 11, 24, 22, 0, 0, 0, time.UTC),
		Latency: DefaultLatency, StorePath: t.TempDir() + "/demo.db",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Pools {
		if p.Name == "small-x64" && (p.Schedule != "nights" || p.Target.Hot != 0 || p.Stopped != 2 || !p.AtTarget) {
			t.Fatalf("small-x64 at night = %+v", p)
		}
	}
}

func TestDemoStopsCleanlyWhenInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := Run(ctx, Options{
		Config: exampleConfig(t), Duration: time.Hour, Start: monday, Latency: DefaultLatency,
		StorePath: t.TempDir() + "/demo.db",
	})
	if err != nil {
		t.Fatalf("interrupted run failed: %v", err)
	}
	if res.Cycles > 1 || !res.Interrupted {
		t.Fatalf("ran %d cycles after cancellation, interrupted %v", res.Cycles, res.Interrupted)
	}
}

// A store file an earlier run left state in is refused, the file named
// with what to do: the new run's simulated cloud has none of its machines.
// An empty file is a new store.
func TestDemoRefusesAStoreThatHoldsState(t *testing.T) {
	path := t.TempDir() + "/demo.db"
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{Config: exampleConfig(t), Duration: 2 * time.Minute, Start: monday, Latency: DefaultLatency, StorePath: path}
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatalf("first run on an empty file: %v", err)
	}
	_, err := Run(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "store "+path+" already holds state") ||
		!strings.Contains(err.Error(), "delete the file or pick another path") {
		t.Fatalf("second run on the same store: %v", err)
	}
}
