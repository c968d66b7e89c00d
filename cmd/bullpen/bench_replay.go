package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"syscall"
	"time"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/demo"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

// replayBench is what `bullpen bench replay` reports.
type replayBench struct {
	Jobs     int     `json:"jobs"`
	Replayed int     `json:"replayed"`
	Pools    int     `json:"pools"`
	Days     float64 `json:"days"`
	// VirtualSeconds is the replay's span; WallSeconds how long it took
	// here; Speedup the one over the other.
	VirtualSeconds float64 `json:"virtual_seconds"`
	WallSeconds    float64 `json:"wall_seconds"`
	Speedup        float64 `json:"speedup"`
	JobsPerSecond  float64 `json:"jobs_per_second"`
	// PeakRSSMB is the process's largest resident set, generation included.
	PeakRSSMB  float64 `json:"peak_rss_mb"`
	P90Seconds float64 `json:"p90_queue_seconds"`
}

// benchReplay replays a generated history (diurnal, with matrix bursts)
// over several pools through simulate and reports its pace.
func benchReplay(ctx context.Context, e *env, args []string) int {
	fs := e.flags("bench replay")
	jobs := fs.Int("jobs", 50_000, "jobs in the generated history")
	days := fs.Float64("days", 7, "days the history spans (0.25: six hours)")
	pools := fs.Int("pools", 6, "pools the jobs are spread over")
	seed := fs.Uint64("seed", 1, "seed of the history and the replay")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the replay to this file")
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	if *jobs <= 0 || *days <= 0 || *pools <= 0 {
		fmt.Fprintln(e.stderr, "bullpen bench replay: --jobs, --days and --pools must be positive")
		return 2
	}
	cfg, err := config.Parse("workload.yml", []byte(simulate.WorkloadConfig(*pools)))
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen bench replay:", err)
		return 1
	}
	environment, err := demo.Environment(cfg, "")
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen bench replay:", err)
		return 1
	}
	start := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC) // a Monday
	history := simulate.Generate(simulate.Workload{Jobs: *jobs, Days: *days, Pools: simulate.WorkloadPools(*pools),
		Environment: environment, Seed: *seed, Start: start})
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen bench replay:", err)
		return 1
	}
	defer stop()
	// The replay runs one task at a time (a serial virtual clock): more
	// Ps only add hand-offs between threads at every turn.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	began := time.Now()
	rep, err := simulate.Run(ctx, simulate.Options{Config: cfg, Environment: environment, Jobs: history, Seed: *seed})
	wall := time.Since(began)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen bench replay:", err)
		return 1
	}
	virtual, _ := time.ParseDuration(rep.Virtual)
	out := replayBench{Jobs: *jobs, Replayed: rep.Replayed, Pools: *pools, Days: *days,
		VirtualSeconds: virtual.Seconds(), WallSeconds: wall.Seconds(), Speedup: virtual.Seconds() / wall.Seconds(),
		JobsPerSecond: float64(rep.Replayed) / wall.Seconds(), PeakRSSMB: peakRSSMB(), P90Seconds: rep.Simulated.QueueTime.P90}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return 1
	}
	return 0
}

// peakRSSMB is the process's peak resident set size (Linux reports it in
// KiB).
func peakRSSMB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024
}
