package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/demo"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

// historyGenerate writes a generated history as JSON lines.
func historyGenerate(_ context.Context, e *env, args []string) int {
	fs := e.flags("history generate")
	cfgPath := fs.String("config", "", "the configuration whose pools the jobs ask for: those of --environment, in the file's order, unless --pools names some")
	envName := fs.String("environment", "", "the environment whose stack takes the jobs (those of any but production carry env=NAME); "+
		"default: with --config, the one simulate serves (the first pool's environment:, else production); without, production")
	pools := fs.String("pools", "", "the pools the jobs ask for (pool=NAME), comma-separated, the busiest first")
	jobs := fs.Int("jobs", 2000, "how many jobs")
	days := fs.Float64("days", 7, "how many days they span, from a Monday (0.25: six hours)")
	seed := fs.Uint64("seed", 1, "the same seed gives the same history")
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	usage := func(msg string) int {
		fmt.Fprintln(e.stderr, "bullpen history generate:", msg)
		return 2
	}
	var names []string
	for _, n := range strings.Split(*pools, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if (len(names) == 0 && *cfgPath == "") || *jobs <= 0 || *days <= 0 {
		return usage("give --pools or --config, and --jobs and --days above zero")
	}
	environment := *envName
	if *cfgPath != "" {
		cfg, ok := loadConfig(e, *cfgPath)
		if !ok {
			return 1
		}
		var err error
		if environment, err = demo.Environment(cfg, environment); err != nil {
			return usage("--environment: " + err.Error())
		}
		if names, err = poolsServed(cfg, environment, names); err != nil {
			return usage(err.Error())
		}
	}
	start := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC) // a Monday
	enc := json.NewEncoder(e.stdout)
	w := simulate.Workload{Jobs: *jobs, Days: *days, Pools: names, Environment: environment, Seed: *seed, Start: start}
	for _, j := range simulate.Generate(w) {
		if err := enc.Encode(j); err != nil {
			fmt.Fprintln(e.stderr, "bullpen history generate:", err)
			return 1
		}
	}
	return 0
}

// poolsServed checks that each named pool is one environment env's stack
// serves in cfg, which a job for any other would never reach; with none
// named, it lists those pools in the file's order.
func poolsServed(cfg *config.Config, env string, names []string) ([]string, error) {
	if len(names) == 0 {
		for _, p := range cfg.PoolsFor(env) {
			names = append(names, p.Name)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("no pool of the configuration belongs to environment %q", env)
		}
		return names, nil
	}
	for _, n := range names {
		p, ok := cfg.Pool(n)
		switch {
		case !ok:
			return nil, fmt.Errorf("--pools: the configuration has no pool %q", n)
		case !config.ServedIn(p, env):
			return nil, fmt.Errorf("--pools: pool %s belongs to environment %s, not %s", n, p.Environment, env)
		}
	}
	return names, nil
}
