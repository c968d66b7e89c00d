package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/schedule"
)

func init() {
	register("validate", "check a configuration file and summarise its pools", cmdValidate)
	register("schedule", "print the schedule entry and targets of a pool at an instant", cmdSchedule)
}

func cmdValidate(_ context.Context, e *env, args []string) int {
	fs := e.flags("validate")
	every := fs.Duration("converge-every", converger.DefaultInterval,
		"serve's --converge-every: an autoscale block whose polls, which come on the converger's cycles, could never scale is refused, as serve refuses it ($BULLPEN_CONVERGE_EVERY)")
	environment := fs.String("environment", e.getenv("BULLPEN_ENVIRONMENT"),
		"check only the pools serve's --environment serves, those of this environment and those naming none (default: every pool) ($BULLPEN_ENVIRONMENT)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: bullpen validate FILE [--converge-every 30s] [--environment NAME]

Checks a pool configuration (runs-on.yml format) as serve does at start and at each reload: prints one line
per pool and exits 0, or lists every problem as FILE:LINE:COL: message and exits 1.
Warnings (settings bullpen ignores) go to the standard error.

serve checks the autoscale blocks of the pools its --environment serves against its --converge-every.
Without --environment the blocks of every pool are checked, whatever its environment: a file that passes
suits every stack that reads it at that interval, where serve's own default (production) would leave the
other environments' pools unchecked. When stacks converge at different intervals, check the file once per
stack with its --environment and --converge-every; with serve's settings in the environment
($BULLPEN_ENVIRONMENT, $BULLPEN_CONVERGE_EVERY) validate checks what that serve checks.

`)
		fs.PrintDefaults()
	}
	if v := e.getenv("BULLPEN_CONVERGE_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(e.stderr, "bullpen validate: $BULLPEN_CONVERGE_EVERY=%s: want a duration with its unit, such as 30s\n", domain.QuoteShort(v))
			return 2
		}
		*every = d
	}
	file, status, ok := e.parseFileArgs(fs, args)
	if !ok {
		return status
	}
	if file == "" {
		fs.Usage()
		return 2
	}
	if *every <= 0 {
		fmt.Fprintf(e.stderr, "bullpen validate: --converge-every %s: want a positive duration\n", *every)
		return 2
	}
	cfg, ok := loadConfig(e, file)
	if !ok {
		return 1
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(e.stderr, "warning: %s\n", w)
	}
	pools, served := cfg.Pools, ""
	if *environment != "" {
		pools, served = cfg.PoolsFor(*environment), " in environment "+*environment
		if named := cfg.Environments(); len(named) > 0 && !cfg.NamesEnvironment(*environment) {
			fmt.Fprintf(e.stderr, "warning: no pool names environment %s, so only pools naming none are checked; the file's environments are %s\n",
				*environment, strings.Join(named, ", "))
		}
	}
	var problems config.Errors
	if errors.As(cfg.CheckCadence(pools, *every), &problems) {
		fmt.Fprintf(e.stderr, "%s has %d problem(s):\n%v\n", file, len(problems), problems)
		return 1
	}
	for _, p := range pools {
		fmt.Fprintln(e.stdout, config.Summary(p))
	}
	fmt.Fprintf(e.stdout, "%s: ok (%d runners, %d pools%s)\n", file, len(cfg.Runners), len(pools), served)
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
	file, status, ok := e.parseFileArgs(fs, args)
	if !ok {
		return status
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
		return 2 // the file is fine: --pool is wrong
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

// parseFileArgs parses fs's flags around one positional FILE, which may
// come first, so flags may follow it as the documented form
// `bullpen schedule FILE --pool NAME` has them, or after the flags. The
// file is "" when none was given.
func (e *env) parseFileArgs(fs *flag.FlagSet, args []string) (file string, status int, ok bool) {
	most := 1 // FILE, when it comes after the flags
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		file, args, most = args[0], args[1:], 0
	}
	if status, ok := e.parseArgs(fs, args, most); !ok {
		return "", status, false
	}
	if file == "" && fs.NArg() == 1 {
		file = fs.Arg(0)
	}
	return file, 0, true
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
