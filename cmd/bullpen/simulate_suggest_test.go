package main

import (
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/demo"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

// The pool jobs' p90 of --suggest is every pool job's: with no warm
// instance configured, every job starts cold, and the p90 as configured is
// theirs, not the 0 of no job served by a warm instance.
func TestSimulateSuggestCountsTheColdOverflowInThePoolsP90(t *testing.T) {
	if testing.Short() {
		t.Skip("several replays")
	}
	jobs := writeHistory(t, "p")
	cfg := writeFile(t, t.TempDir(), "cold.yml", "runners:\n  small: {image: ubuntu24-full-x64, ram: 1, family: [t3]}\npools:\n  p:\n    environment: dev\n    runner: small\n"+
		"    schedule:\n      - name: default\n        hot: 0\n")
	out, errOut := mustRun(t, "simulate", "--config", cfg, "--jobs", jobs, "--suggest", "--target-p90", "10s", "--rounds", "0")
	if strings.Contains(errOut, "as configured: pool jobs' p90 0.0 s") || !strings.Contains(errOut, "as configured: pool jobs' p90 ") {
		t.Errorf("the p90 as configured leaves out the jobs that started cold:\n%s", errOut)
	}
	if strings.Contains(out, "(as configured: 0.0 s,") {
		t.Errorf("the suggestion's p90 as configured leaves out the jobs that started cold:\n%s", out)
	}
}

// A p90 over jobs some of which did not start says how many and that it
// is a lower bound.
func TestPoolP90SaysWhenJobsDidNotStart(t *testing.T) {
	if got := poolP90(simulate.Waited{Latencies: demo.Latencies{P90: 12}}); got != "12.0 s" {
		t.Errorf("every job started: %q", got)
	}
	got := poolP90(simulate.Waited{Latencies: demo.Latencies{P90: 900}, NotStarted: 4})
	if got != "900.0 s or more (4 did not start and count as waiting until the replay's end)" {
		t.Errorf("4 jobs not started: %q", got)
	}
}

// The suggestion warns when its schedules serve fewer jobs from the
// pools' warm instances than the configuration as given, and only then.
func TestSuggestWarnsWhenFewerJobsAreServedFromThePools(t *testing.T) {
	served := func(n int) simulate.Report {
		var r simulate.Report
		r.Simulated.QueueTimes = map[string]demo.Latencies{"pool": {Count: n}}
		return r
	}
	if line := fewerFromPools(served(30), served(22)); !strings.Contains(line, "serve 22 jobs from the pools' warm instances, where the configuration as given serves 30") {
		t.Errorf("fewer served from the pools: %q", line)
	}
	if line := fewerFromPools(served(30), served(30)); line != "" {
		t.Errorf("as many served from the pools: %q", line)
	}
}
