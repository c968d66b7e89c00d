package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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

// demoFlags are demo's settings.
type demoFlags struct {
	config, start, store, env  string
	speed, perMinute           float64
	duration, rollAt, interval time.Duration
	asJSON, verbose            bool
	seed                       uint64
}

func (f *demoFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "pool configuration (default: the built-in examples/runs-on.yml)")
	fs.Float64Var(&f.speed, "speed", 60, "virtual seconds per real second; 0 runs as fast as the simulation settles")
	fs.DurationVar(&f.duration, "duration", 10*time.Minute, "virtual time to run for")
	fs.BoolVar(&f.asJSON, "json", false, "end with one JSON object on stdout (cycle lines go to stderr)")
	fs.DurationVar(&f.rollAt, "roll-at", 0, "publish a new image version at this virtual offset, rolling every pool (e.g. 5m)")
	fs.StringVar(&f.start, "start", "", "virtual start time, RFC 3339 (default: now); schedules are matched at this time")
	fs.DurationVar(&f.interval, "interval", 30*time.Second, "converger interval")
	fs.StringVar(&f.store, "store", "", "SQLite file to keep the state in; it must not exist or be empty (default: a temporary file)")
	fs.StringVar(&f.env, "environment", "", "the environment whose pools are served, as serve's --environment (default: the first pool's environment:, else production)")
	fs.BoolVar(&f.verbose, "v", false, "log the control plane's decisions to stderr")
	fs.Float64Var(&f.perMinute, "jobs-per-minute", 6, "mean rate of simulated workflow jobs (0: pools only)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the simulated job stream")
}

func cmdDemo(ctx context.Context, e *env, args []string) int {
	fs := e.flags("demo")
	var f demoFlags
	f.define(fs)
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	cfg, ok := demoConfig(e, f.config)
	if !ok {
		return 1
	}
	o, err := f.options(e, cfg)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen demo:", err)
		return 2
	}
	return runDemo(ctx, e, o, f.asJSON)
}

// options turns the flags into the demo's options. With --json the cycle
// lines go to stderr, leaving stdout to the one JSON object.
func (f *demoFlags) options(e *env, cfg *config.Config) (demo.Options, error) {
	o := demo.Options{
		Config: cfg, Speed: f.speed, Duration: f.duration, RollAt: f.rollAt, Interval: f.interval,
		Latency: demo.DefaultLatency, StorePath: f.store, Lines: e.stdout, JobsPerMinute: f.perMinute, Seed: f.seed, Environment: f.env,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if f.asJSON {
		o.Lines = e.stderr
	}
	if f.verbose {
		o.Log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	o.Start = time.Now().UTC().Truncate(time.Second)
	var problems []error
	if _, err := demo.Environment(cfg, f.env); err != nil {
		problems = append(problems, fmt.Errorf("--environment: %w", err))
	}
	if f.start != "" {
		t, err := time.Parse(time.RFC3339, f.start)
		if err != nil {
			problems = append(problems, fmt.Errorf("--start %q: want RFC 3339, e.g. 2026-11-23T09:00:00Z", f.start))
		}
		o.Start = t
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"duration", f.duration}, {"interval", f.interval}} {
		if d.v <= 0 {
			problems = append(problems, fmt.Errorf("--%s %s: want a positive duration", d.flag, d.v))
		}
	}
	if f.interval > 0 && f.interval < time.Second {
		// Each cycle is a line or more: a millisecond makes a ten-minute
		// demo hundreds of thousands of them.
		problems = append(problems, fmt.Errorf("--interval %s: want at least 1s", f.interval))
	}
	if f.rollAt < 0 || f.rollAt >= f.duration && f.rollAt != 0 {
		problems = append(problems, fmt.Errorf("--roll-at %s: want an offset within --duration %s", f.rollAt, f.duration))
	}
	problems = append(problems, checkRate("speed", f.speed), checkRate("jobs-per-minute", f.perMinute))
	if err := errors.Join(problems...); err != nil {
		return demo.Options{}, err
	}
	return o, nil
}

// runDemo runs the demo and prints its outcome: a summary, or with asJSON
// one JSON object. An interrupted demo still prints its final state.
func runDemo(ctx context.Context, e *env, o demo.Options, asJSON bool) int {
	demo.Header(o.Lines, o)
	res, err := demo.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen demo:", err)
		return 1
	}
	if res.Interrupted {
		fmt.Fprintln(o.Lines, "\ninterrupted; final state below")
	}
	if asJSON {
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
