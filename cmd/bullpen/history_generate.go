package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/simulate"
)

// historyGenerate writes a generated history as JSON lines.
func historyGenerate(_ context.Context, e *env, args []string) int {
	fs := e.flags("history generate")
	pools := fs.String("pools", "", "the pools the jobs ask for (pool=NAME), comma-separated, the busiest first")
	jobs := fs.Int("jobs", 2000, "how many jobs")
	days := fs.Float64("days", 7, "how many days they span, from a Monday (0.25: six hours)")
	seed := fs.Uint64("seed", 1, "the same seed gives the same history")
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	var names []string
	for _, n := range strings.Split(*pools, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 || *jobs <= 0 || *days <= 0 {
		fmt.Fprintln(e.stderr, "bullpen history generate: give --pools, and --jobs and --days above zero")
		return 2
	}
	start := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC) // a Monday
	enc := json.NewEncoder(e.stdout)
	for _, j := range simulate.Generate(simulate.Workload{Jobs: *jobs, Days: *days, Pools: names, Seed: *seed, Start: start}) {
		if err := enc.Encode(j); err != nil {
			fmt.Fprintln(e.stderr, "bullpen history generate:", err)
			return 1
		}
	}
	return 0
}
