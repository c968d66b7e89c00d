package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/schedule"
)

func init() {
	register("validate", "check a configuration file and summarise its pools", cmdValidate)
	register("schedule", "print the schedule entry and targets of a pool at an instant", cmdSchedule)
}

func cmdValidate(_ context.Context, e *env, args []string) int {
	fs := e.flags("validate")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: bullpen validate FILE\n\nChecks a pool configuration (runs-on.yml format): prints one line per pool and exits 0,\nor lists every problem as FILE:LINE:COL: message and exits 1.")
	}
	if status, ok := e.parseArgs(fs, args, 1); !ok {
		return status
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	cfg, ok := loadConfig(e, fs.Arg(0))
	if !ok {
		return 1
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(e.stderr, "warning: %s\n", w)
	}
	for _, p := range cfg.Pools {
		fmt.Fprintln(e.stdout, config.Summary(p))
	}
	fmt.Fprintf(e.stdout, "%s: ok (%d runners, %d pools)\n", fs.Arg(0), len(cfg.Runners), len(cfg.Pools))
	return 0
}

func cmdSchedule(_ context.Context, e *env, args []string) int {
	fs := e.flags("schedule")
	pool := fs.String("pool", "", "pool name (required)")
	at := fs.String("at", "", "instant, RFC 3339 (default: now)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: bullpen schedule FILE --pool NAME [--at RFC3339]")
		fs.PrintDefaults()
	}
	file, rest := splitFile(args)
	most := 1 // FILE, when it comes after the flags
	if file != "" {
		most = 0
	}
	if status, ok := e.parseArgs(fs, rest, most); !ok {
		return status
	}
	if file == "" && fs.NArg() == 1 {
		file = fs.Arg(0)
	}
	if file == "" || *pool == "" {
		fs.Usage()
		return 2
	}
	when := time.Now()
	if *at != "" {
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil {
			fmt.Fprintf(e.stderr, "bullpen schedule: bad --at %q: want RFC 3339, e.g. 2026-11-22T23:30:00+01:00\n", *at)
			return 2
		}
		when = t
	}
	cfg, ok := loadConfig(e, file)
	if !ok {
		return 1
	}
	p, ok := cfg.Pool(*pool)
	if !ok {
		fmt.Fprintf(e.stderr, "bullpen schedule: unknown pool %q in %s (pools: %s)\n", *pool, file, poolNames(cfg))
		return 1
	}
	r := schedule.Resolve(p, when)
	out, _ := json.Marshal(struct {
		Pool     string `json:"pool"`
		Schedule string `json:"schedule"`
		Hot      int    `json:"hot"`
		Stopped  int    `json:"stopped"`
	}{p.Name, r.Entry, r.Target.Hot, r.Target.Stopped})
	fmt.Fprintln(e.stdout, string(out))
	return 0
}

// splitFile takes a leading positional FILE so flags may follow it, as the
// documented form `bullpen schedule FILE --pool NAME` has them.
func splitFile(args []string) (string, []string) {
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		return args[0], args[1:]
	}
	return "", args
}

func poolNames(cfg *config.Config) string {
	s := ""
	for i, p := range cfg.Pools {
		if i > 0 {
			s += ", "
		}
		s += p.Name
	}
	if s == "" {
		return "none"
	}
	return s
}

// loadConfig reads a configuration or explains why not.
func loadConfig(e *env, path string) (*config.Config, bool) {
	cfg, err := config.Load(path)
	if err != nil {
		var list config.Errors
		if errors.As(err, &list) {
			fmt.Fprintf(e.stderr, "%s has %d problem(s):\n%v\n", path, len(list), err)
		} else {
			fmt.Fprintln(e.stderr, err)
		}
		return nil, false
	}
	return cfg, true
}
