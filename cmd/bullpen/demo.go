package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/bullpen-ci/bullpen/examples"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/demo"
)

func init() {
	register("demo", "watch pools converge on the simulated cloud (no account needed)", cmdDemo)
}

func cmdDemo(ctx context.Context, e *env, args []string) int {
	fs := e.flags("demo")
	cfgPath := fs.String("config", "", "pool configuration (default: the built-in examples/runs-on.yml)")
	speed := fs.Float64("speed", 60, "virtual seconds per real second; 0 runs as fast as the simulation settles")
	duration := fs.Duration("duration", 10*time.Minute, "virtual time to run for")
	asJSON := fs.Bool("json", false, "end with one JSON object on stdout (cycle lines go to stderr)")
	rollAt := fs.Duration("roll-at", 0, "publish a new image version at this virtual offset, rolling every pool (e.g. 5m)")
	start := fs.String("start", "", "virtual start time, RFC 3339 (default: now); schedules are matched at this time")
	interval := fs.Duration("interval", 30*time.Second, "converger interval")
	storePath := fs.String("store", "", "SQLite file to keep the state in (default: a temporary file)")
	verbose := fs.Bool("v", false, "log the control plane's decisions to stderr")
	perMinute := fs.Float64("jobs-per-minute", 6, "mean rate of simulated workflow jobs (0: pools only)")
	seed := fs.Uint64("seed", 1, "seed of the simulated job stream")
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	cfg, ok := demoConfig(e, *cfgPath)
	if !ok {
		return 1
	}
	o := demo.Options{
		Config: cfg, Speed: *speed, Duration: *duration, RollAt: *rollAt, Interval: *interval,
		Latency: demo.DefaultLatency, StorePath: *storePath, Lines: e.stdout, JobsPerMinute: *perMinute, Seed: *seed,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if *asJSON {
		o.Lines = e.stderr
	}
	if *verbose {
		o.Log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	o.Start = time.Now().UTC().Truncate(time.Second)
	if *start != "" {
		t, err := time.Parse(time.RFC3339, *start)
		if err != nil {
			fmt.Fprintf(e.stderr, "bullpen demo: bad --start %q: want RFC 3339\n", *start)
			return 2
		}
		o.Start = t
	}
	if *duration <= 0 || *speed < 0 || *interval <= 0 || *perMinute < 0 {
		fmt.Fprintln(e.stderr, "bullpen demo: --duration and --interval must be positive, --speed and --jobs-per-minute not negative")
		return 2
	}
	demo.Header(o.Lines, o)
	res, err := demo.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen demo:", err)
		return 1
	}
	if ctx.Err() != nil {
		fmt.Fprintln(o.Lines, "\ninterrupted; final state below")
	}
	if *asJSON {
		if err := json.NewEncoder(e.stdout).Encode(res); err != nil {
			return 1
		}
		return 0
	}
	demo.Summary(e.stdout, res)
	return 0
}

// demoConfig loads the configuration the demo runs, the built-in example
// unless a file is named; problems are reported on stderr.
func demoConfig(e *env, path string) (*config.Config, bool) {
	if path != "" {
		return loadConfig(e, path)
	}
	cfg, err := config.Parse("examples/runs-on.yml", examples.RunsOn)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen demo: built-in example:", err)
		return nil, false
	}
	return cfg, true
}
