package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/demo"
	"github.com/bullpen-ci/bullpen/internal/history"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

func init() {
	register("simulate", "replay a job history against a pool configuration and report the queue times", cmdSimulate)
}

// simulateFlags are simulate's settings.
type simulateFlags struct {
	config, jobs, compare string
	prices, timings, env  string
	asJSON, suggest       bool
	seed                  uint64
	target                time.Duration
	rounds                int
}

func (f *simulateFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "the pool configuration (runs-on.yml format)")
	fs.StringVar(&f.jobs, "jobs", "", "the job history, as bullpen history export writes it (JSON lines)")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	fs.StringVar(&f.env, "environment", "", "the environment whose pools serve the jobs, as serve's --environment (default: the first pool's environment:, else production)")
	fs.StringVar(&f.compare, "compare", "", "a second configuration: replay the same history through it and print both side by side")
	fs.Uint64Var(&f.seed, "seed", 1, "the simulation's seed")
	fs.StringVar(&f.prices, "prices", "", "a price table (JSON, as internal/simulate/prices.json) instead of the one shipped")
	fs.StringVar(&f.timings, "timings", "", "machine timings (JSON: a default and overrides per instance family) instead of the demo's")
	fs.BoolVar(&f.suggest, "suggest", false, "search pool schedules that meet --target-p90 and print the configuration with them")
	fs.DurationVar(&f.target, "target-p90", 0, "with --suggest: the queue time 90% of each pool's jobs should start within, in each hour of the week")
	fs.IntVar(&f.rounds, "rounds", 4, "with --suggest: the most replays after the first estimate")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: bullpen simulate --config runs-on.yml --jobs history.jsonl [--compare other.yml] [--json]
       bullpen simulate --config runs-on.yml --jobs history.jsonl --suggest --target-p90 30s > suggested.yml

Replays the history's jobs at their original arrival times and run times
through bullpen's control plane (converger, dispatch, provisioning, release,
autoscaling) on the simulated cloud and a virtual clock, and reports the
queue times it gives — overall, by pool, and by how jobs were served — next
to the queue times the history recorded for the jobs it served. Jobs whose
labels are not for bullpen (GitHub-hosted ones) are counted apart. Jobs no
runner took by the replay's end are counted, by pool, and their queue
times run to the end: figures over them are lower bounds.

`)
		fs.PrintDefaults()
	}
}

func cmdSimulate(ctx context.Context, e *env, args []string) int {
	fs := e.flags("simulate")
	var f simulateFlags
	f.define(fs)
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	// 2: the command line is wrong; 1: a file it names, or the replay,
	// failed (as for validate and demo).
	fail := func(err error) int {
		fmt.Fprintln(e.stderr, "bullpen simulate:", err)
		return 1
	}
	if err := f.check(); err != nil {
		fmt.Fprintln(e.stderr, "bullpen simulate:", err)
		return 2
	}
	cfg, ok := loadConfig(e, f.config)
	if !ok {
		return 1
	}
	if _, err := demo.Environment(cfg, f.env); err != nil {
		fmt.Fprintln(e.stderr, "bullpen simulate: --environment:", err)
		return 2
	}
	replay, err := f.replayOptions(cfg, e.stderr)
	if err != nil {
		return fail(err)
	}
	configs := []*config.Config{cfg}
	var other *config.Config
	if f.compare != "" {
		// Refused before any replay: a long history's replay through
		// --config would otherwise run first, only to end on this.
		if other, ok = loadConfig(e, f.compare); !ok {
			return 1
		}
		configs = append(configs, other)
	}
	if unused, launched := familiesNoRunnerLaunches(replay.FamilyLatency, configs); len(unused) > 0 {
		fmt.Fprintf(e.stderr, "bullpen simulate: warning: --timings %s sets the timings of families no runner launches in the simulation: %s (the runners launch %s); "+
			"a job whose family= label asks for one of them still takes its timings\n", f.timings, strings.Join(unused, ", "), cmp.Or(strings.Join(launched, ", "), "none"))
	}
	if isTerminal(e.stderr) {
		replay.Progress = replayProgress(e.stderr, time.Now())
	}
	if f.suggest {
		return suggestSchedules(ctx, e, f.config, simulate.SuggestOptions{Options: replay, TargetP90: f.target, Rounds: f.rounds}, f.asJSON, fail)
	}
	return f.replayAndPrint(ctx, e, replay, other, fail)
}

// check says which flags are missing or do not go together.
func (f *simulateFlags) check() error {
	if f.config == "" || f.jobs == "" {
		return errors.New("give --config and --jobs")
	}
	if !f.suggest && f.target != 0 {
		return errors.New("--target-p90 goes with --suggest")
	}
	if f.rounds < 0 {
		return fmt.Errorf("--rounds %d: want 0 or more", f.rounds)
	}
	if f.suggest && (f.target <= 0 || f.compare != "") {
		return errors.New("--suggest needs --target-p90 (a duration > 0) and takes no --compare")
	}
	return nil
}

// replayOptions reads the history, and the price table and machine
// timings when given, into the options of a replay through cfg.
func (f *simulateFlags) replayOptions(cfg *config.Config, stderr io.Writer) (simulate.Options, error) {
	read, err := readHistory(f.jobs)
	if err != nil {
		return simulate.Options{}, err
	}
	if read.Duplicates > 0 {
		// Two overlapping exports concatenated: each job is replayed once.
		fmt.Fprintf(stderr, "%s: %d lines repeat an earlier line's job: dropped\n", f.jobs, read.Duplicates)
	}
	jobs := read.Jobs
	var prices *simulate.Prices
	if f.prices != "" {
		b, err := os.ReadFile(f.prices)
		if err != nil {
			return simulate.Options{}, err
		}
		p, err := simulate.ParsePrices(f.prices, b)
		if err != nil {
			return simulate.Options{}, err
		}
		prices = &p
	}
	timings := simulate.DefaultTimings()
	if f.timings != "" {
		b, err := os.ReadFile(f.timings)
		if err != nil {
			return simulate.Options{}, err
		}
		if timings, err = simulate.ParseTimings(f.timings, b); err != nil {
			return simulate.Options{}, err
		}
	}
	return simulate.Options{Config: cfg, Jobs: jobs, Seed: f.seed, Prices: prices, Environment: f.env,
		Latency: timings.Default, FamilyLatency: timings.Families}, nil
}

// familiesNoRunnerLaunches are the families of timings that no runner of
// the configurations launches on the simulated cloud (a misspelt family,
// or one the runners' sizes rule out), and the families they launch.
func familiesNoRunnerLaunches(timings map[string]sim.Latency, configs []*config.Config) (unused, launched []string) {
	families := map[string]bool{}
	for _, cfg := range configs {
		for _, r := range cfg.Runners {
			if itype, err := sim.InstanceType(r); err == nil {
				family, _, _ := strings.Cut(itype, ".")
				families[family] = true
			}
		}
	}
	for _, family := range sortedKeys(timings) {
		if !families[family] {
			unused = append(unused, family)
		}
	}
	return unused, sortedKeys(families)
}

// readHistory reads a job history file.
func readHistory(path string) (history.Contents, error) {
	f, err := os.Open(path)
	if err != nil {
		return history.Contents{}, err
	}
	defer f.Close()
	return history.ReadContents(path, f)
}

// replayAndPrint replays the history through --config and prints the
// report; with other, --compare's configuration, replays it through that
// configuration too and prints both.
func (f *simulateFlags) replayAndPrint(ctx context.Context, e *env, replay simulate.Options, other *config.Config, fail func(error) int) int {
	rep, err := simulate.Run(ctx, replay)
	if replay.Progress != nil {
		fmt.Fprintln(e.stderr)
	}
	if err != nil {
		return fail(err)
	}
	if other == nil {
		return printReport(e, f.asJSON, rep, fail)
	}
	// The history's jobs are labelled for one environment's stack: B
	// serves the environment A served, whichever its own pools name first.
	replay.Config, replay.Progress, replay.Environment = other, nil, rep.Environment
	alt, err := simulate.Run(ctx, replay)
	if err != nil {
		return fail(fmt.Errorf("--compare %s: %w", f.compare, err))
	}
	if f.asJSON {
		return printReport(e, true, map[string]simulate.Report{f.config: rep, f.compare: alt}, fail)
	}
	printComparison(e.stdout, f.config, f.compare, rep, alt)
	return 0
}

func printReport(e *env, asJSON bool, rep any, fail func(error) int) int {
	if !asJSON {
		printSimulation(e.stdout, rep.(simulate.Report))
		return 0
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fail(err)
	}
	return 0
}

// replayProgress prints how far a replay has come on one terminal line:
// the virtual time reached, the jobs arrived, and an estimate of the time
// left from the pace so far.
func replayProgress(w io.Writer, began time.Time) func(time.Time, int, int) {
	return func(at time.Time, arrived, total int) {
		left := "?"
		if arrived > 0 {
			elapsed := time.Since(began)
			left = (time.Duration(float64(elapsed) * float64(total-arrived) / float64(arrived))).Round(time.Second).String()
		}
		fmt.Fprintf(w, "\rreplayed to %s: %d of %d jobs arrived, about %s left   ", at.UTC().Format("Mon 15:04"), arrived, total, left)
	}
}

// printComparison puts two replays of one history side by side, with the
// difference of the second from the first. Every section's rows hold
// their figures in the columns of its heading.
func printComparison(w io.Writer, nameA, nameB string, a, b simulate.Report) {
	fmt.Fprintf(w, "%d jobs replayed through %s (A) and %s (B), environment %s\n", a.Replayed, nameA, nameB, a.Environment)
	heading := func(title string) { fmt.Fprintf(w, "\n%-23s %7s %7s %7s\n", title, "A", "B", "B-A") }
	count := func(name string, x, y int) { fmt.Fprintf(w, "  %-21s %7d %7d %+7d\n", name, x, y, y-x) }
	servedA, servedB := a.Simulated.QueueTime.Count, b.Simulated.QueueTime.Count
	heading("jobs")
	count("served", servedA, servedB)
	for _, via := range []string{"pool", "hot", "stopped", "reuse", "cold"} {
		name := "  by " + via
		if via == "hot" || via == "stopped" {
			name = "    " + via // of the pool's
		}
		count(name, a.Simulated.QueueTimes[via].Count, b.Simulated.QueueTimes[via].Count)
	}
	count("no pool or runner", unserved(a), unserved(b))
	count("not started", a.Waits.All.NotStarted, b.Waits.All.NotStarted)
	for _, pool := range poolsNotStarted(a, b) {
		count("  pool "+pool, a.Waits.ByPool[pool].NotStarted, b.Waits.ByPool[pool].NotStarted)
	}
	count("not for bullpen", a.NotForBullpen, b.NotForBullpen)
	if servedA != servedB {
		// A configuration that serves fewer jobs has a smaller bill for
		// it: say so before the figures.
		fmt.Fprintf(w, "  note: A and B served different jobs; their costs are over the jobs each served\n")
	}
	heading("queue time (s)")
	row := func(name string, x, y float64) { fmt.Fprintf(w, "  %-21s %7.1f %7.1f %+7.1f\n", name, x, y, y-x) }
	qa, qb := a.Waits.All, b.Waits.All
	row("p50", qa.P50, qb.P50)
	row("p90", qa.P90, qb.P90)
	row("p99", qa.P99, qb.P99)
	row("max", qa.Max, qb.Max)
	if qa.NotStarted > 0 || qb.NotStarted > 0 {
		fmt.Fprintf(w, "  note: %s\n", notStartedCounted)
	}
	heading("cost (USD)")
	// Dollars in cents, and a job's share to a hundredth of a cent: at
	// the queue times' one decimal, a job's cost read 0.0.
	money := func(name, format string, x, y float64) {
		fmt.Fprintf(w, "  %-21s "+format+" "+format+" %+"+format[1:]+"\n", name, x, y, y-x)
	}
	money("total", "%7.2f", a.Bill.Total, b.Bill.Total)
	money("per completed job", "%7.4f", a.Bill.PerJob, b.Bill.PerJob)
	money("idle hot instances", "%7.2f", a.Bill.HotIdle, b.Bill.HotIdle)
	fmt.Fprintf(w, "  prices: %s\n", a.Bill.PriceTable)
	heading("cloud calls")
	ops := map[string]bool{}
	for op := range a.CloudCalls {
		ops[op] = true
	}
	for op := range b.CloudCalls {
		ops[op] = true
	}
	for _, op := range sortedKeys(ops) {
		count(op, a.CloudCalls[op], b.CloudCalls[op])
	}
}

// notStartedCounted says how the queue times count the jobs no runner
// took: leaving them out would let a configuration too small to start
// them read as fast.
const notStartedCounted = "jobs not started count as waiting until the replay's end, so queue times over them are lower bounds"

// poolsNotStarted are the pools with jobs that did not start in either
// replay.
func poolsNotStarted(reports ...simulate.Report) []string {
	pools := map[string]bool{}
	for _, r := range reports {
		for pool, w := range r.Waits.ByPool {
			if w.NotStarted > 0 {
				pools[pool] = true
			}
		}
	}
	return sortedKeys(pools)
}

// unserved counts the jobs of r that no pool or runner serves.
func unserved(r simulate.Report) int {
	n := 0
	for _, u := range r.Simulated.Unserved {
		n += u.Jobs
	}
	return n
}

func printSimulation(w io.Writer, r simulate.Report) {
	fmt.Fprintf(w, "%d jobs from %s to %s, %d replayed (%s simulated) by the pools of environment %s\n", r.Jobs,
		r.From.Format("2006-01-02 15:04"), r.To.Format("2006-01-02 15:04"), r.Replayed, r.Virtual, r.Environment)
	if r.NotForBullpen > 0 {
		fmt.Fprintf(w, "not for bullpen: %d (their labels leave them to GitHub's runners or to another stack), left out of the figures\n", r.NotForBullpen)
	}
	if r.NotRun > 0 {
		fmt.Fprintf(w, "never ran: %d (no start or no completion in the history), not replayed\n", r.NotRun)
	}
	fmt.Fprintf(w, "window: %s, from the first arrival to the last completion of the replayed jobs\n", spanOf(r.Window))
	if len(r.OtherPools) > 0 {
		fmt.Fprintf(w, "not served here (pools of other environments): %s\n", strings.Join(r.OtherPools, ", "))
	}
	notStarted := r.Waits.All.NotStarted > 0
	if notStarted {
		var pools []string
		for _, pool := range poolsNotStarted(r) {
			pools = append(pools, fmt.Sprintf("pool %s %d", pool, r.Waits.ByPool[pool].NotStarted))
		}
		if len(pools) > 0 {
			pools[0] = " (" + pools[0]
			pools[len(pools)-1] += ")"
		}
		fmt.Fprintf(w, "not started: %d jobs no runner had taken when the replay ended%s; %s\n",
			r.Waits.All.NotStarted, strings.Join(pools, ", "), notStartedCounted)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "queue time (s)        %6s %6s %6s %6s %6s", "jobs", "p50", "p90", "p99", "max")
	if notStarted {
		fmt.Fprintf(w, " %11s", "not started")
	}
	fmt.Fprintln(w)
	row := func(name string, l demo.Latencies) {
		fmt.Fprintf(w, "  %-19s %6d %6s %6s %6s %6s\n", name, l.Count, seconds(l.P50), seconds(l.P90), seconds(l.P99), seconds(l.Max))
	}
	// waited is a row of jobs some of which may not have started: how many
	// did not says that its figures are lower bounds.
	waited := func(name string, l simulate.Waited) {
		fmt.Fprintf(w, "  %-19s %6d %6s %6s %6s %6s", name, l.Count, seconds(l.P50), seconds(l.P90), seconds(l.P99), seconds(l.Max))
		if notStarted {
			fmt.Fprintf(w, " %11d", l.NotStarted)
		}
		fmt.Fprintln(w)
	}
	row("recorded", r.Recorded) // the jobs the replay served, as the history recorded them
	waited("simulated", r.Waits.All)
	for _, via := range []string{"pool", "hot", "stopped", "reuse", "cold"} {
		if l, ok := r.Simulated.QueueTimes[via]; ok {
			name := "  served by " + via
			if via == "hot" || via == "stopped" {
				name = "    " + via
			}
			row(name, l)
		}
	}
	for _, pool := range sortedKeys(r.Waits.ByPool) {
		waited("  pool "+pool, r.Waits.ByPool[pool])
	}
	for _, hour := range weekOrder(sortedKeys(r.Waits.ByHour)) {
		waited("  queued "+hour+"h UTC", r.Waits.ByHour[hour])
	}
	if len(r.Simulated.Unserved) > 0 {
		fmt.Fprintln(w, "\njobs no pool or runner serves:")
		for _, labels := range sortedKeys(r.Simulated.Unserved) {
			u := r.Simulated.Unserved[labels]
			fmt.Fprintf(w, "  %d × %s: %s\n", u.Jobs, labels, u.Reason)
		}
	}
	fmt.Fprintf(w, "\ninstance-hours           %8s %8s %8s %8s %8s\n", "hot-idle", "busy", "warming", "stopped", "other")
	byType := map[string]map[string]float64{}
	for _, h := range r.InstanceHours {
		k := h.Type + " " + h.Option
		if byType[k] == nil {
			byType[k] = map[string]float64{}
		}
		byType[k][h.State] += h.Hours
	}
	for _, k := range sortedKeys(byType) {
		s := byType[k]
		fmt.Fprintf(w, "  %-22s %8.2f %8.2f %8.2f %8.2f %8.2f\n", k, s["hot-idle"], s["busy"], s["warming"], s["stopped"], s["other"])
	}
	fmt.Fprintf(w, "\nestimated cost (USD, prices %s): %.2f — compute %.2f (idle hot instances %.2f), volumes %.2f; %.4f per completed job\n",
		r.Bill.PriceTable, r.Bill.Total, r.Bill.Total-r.Bill.Volumes, r.Bill.HotIdle, r.Bill.Volumes, r.Bill.PerJob)
	fmt.Fprintf(w, "  over the replay's run from the first arrival, %s: it ended %s after the window; the %s of warm-up before it is not billed\n",
		spanOf(r.Run), r.Run.To.Sub(r.Window.To), r.Run.From.Sub(r.Start))
	if len(r.Bill.Unpriced) > 0 {
		fmt.Fprintf(w, "  not priced (no price in the table): %s\n", strings.Join(r.Bill.Unpriced, ", "))
	}
	var calls []string
	for _, op := range sortedKeys(r.CloudCalls) {
		calls = append(calls, fmt.Sprintf("%s %d", op, r.CloudCalls[op]))
	}
	fmt.Fprintf(w, "\ncloud calls: %s\n", strings.Join(calls, ", "))
}

// seconds writes a queue time in a column six wide: to a tenth of a
// second under 10000 s, whole seconds past that, which jobs waiting
// hours to start reach.
func seconds(s float64) string {
	if s < 9999.95 {
		return fmt.Sprintf("%.1f", s)
	}
	return fmt.Sprintf("%.0f", s)
}

// spanOf writes a window as its ends and its length.
func spanOf(win simulate.Window) string {
	to := win.To.Format("15:04:05")
	if win.To.YearDay() != win.From.YearDay() || win.To.Year() != win.From.Year() {
		to = win.To.Format("2006-01-02 15:04:05")
	}
	return fmt.Sprintf("%s to %s (%s)", win.From.Format("2006-01-02 15:04:05"), to, win.To.Sub(win.From))
}

// weekOrder sorts "Mon 09"-style hours of the week from Monday on.
func weekOrder(hours []string) []string {
	day := map[string]int{"Mon": 0, "Tue": 1, "Wed": 2, "Thu": 3, "Fri": 4, "Sat": 5, "Sun": 6}
	sort.SliceStable(hours, func(i, j int) bool {
		a, b := hours[i], hours[j]
		if day[a[:3]] != day[b[:3]] {
			return day[a[:3]] < day[b[:3]]
		}
		return a < b
	})
	return hours
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
