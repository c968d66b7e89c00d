package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/demo"
	"github.com/bullpen-ci/bullpen/internal/history"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

// writeHistory writes half an hour of pool jobs for the dev stack (which
// takes only jobs labelled env=dev), one every 40 s, each running two
// minutes.
func writeHistory(t *testing.T, pool string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	start := time.Date(2026, 11, 24, 14, 0, 0, 0, time.UTC)
	for i := range 45 {
		at := start.Add(time.Duration(i) * 40 * time.Second)
		started, completed := at.Add(4*time.Second), at.Add(124*time.Second)
		id := int64(i + 1)
		if err := enc.Encode(history.Job{ID: id, RunID: 500 + id, Repo: "acme/app", Name: "build",
			Labels: []string{fmt.Sprintf("runs-on=%d/pool=%s/env=dev", 500+id, pool)}, Created: at,
			Started: &started, Completed: &completed, Conclusion: "success"}); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// simulate --suggest prints the configuration with schedules that meet
// the target, which validate accepts; pools the history does not use keep
// their schedules; the rounds are told on stderr.
func TestSimulateSuggestPrintsAValidConfiguration(t *testing.T) {
	if testing.Short() {
		t.Skip("several replays")
	}
	jobs := writeHistory(t, "small-x64")
	out, errOut := mustRun(t, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", jobs, "--suggest", "--target-p90", "10s")
	wantAll(t, "stderr", errOut, "as configured: pool jobs' p90", "round 1: pool jobs' p90", "pool medium-x64: no job of the history went to it")
	cfg, err := config.Parse("suggested.yml", []byte(out))
	if err != nil {
		t.Fatalf("the suggestion does not parse: %v\n%s", err, out)
	}
	small, _ := cfg.Pool("small-x64")
	medium, _ := cfg.Pool("medium-x64")
	if small.Timezone != "" || len(small.Schedule) < 2 || medium.Timezone != "America/New_York" {
		t.Errorf("small-x64 %+v, medium-x64 %+v: want a UTC schedule for the first, the second as configured", small.Schedule, medium.Timezone)
	}
	file := writeFile(t, t.TempDir(), "suggested.yml", out)
	if code, vout, verr := runWithEnv(nil, "validate", file); code != 0 {
		t.Fatalf("validate refuses the suggestion: %s%s", vout, verr)
	}

	for _, args := range [][]string{{"--suggest"}, {"--suggest", "--target-p90", "10s", "--compare", "../../examples/runs-on.yml"}} {
		code, _, errOut := runWithEnv(nil, append([]string{"simulate", "--config", "../../examples/runs-on.yml", "--jobs", jobs}, args...)...)
		if code != 2 || !strings.Contains(errOut, "--suggest needs --target-p90") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
	for args, want := range map[string]string{"--target-p90 10s": "--target-p90 goes with --suggest", "--suggest --target-p90 10s --rounds -1": "--rounds -1: want 0 or more"} {
		code, _, errOut := runWithEnv(nil, append([]string{"simulate", "--config", "../../examples/runs-on.yml", "--jobs", jobs}, strings.Fields(args)...)...)
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d: %s", args, code, errOut)
		}
	}
}

// bench replay generates a history over several pools, replays it and
// reports its pace as JSON.
func TestBenchReplayReportsItsPace(t *testing.T) {
	if testing.Short() {
		t.Skip("a replay")
	}
	code, out, errOut := runWithEnv(nil, "bench", "replay", "--jobs", "30", "--days", "0.1", "--pools", "3")
	var rep struct {
		Jobs, Replayed, Pools int
		VirtualSeconds        float64 `json:"virtual_seconds"`
		Speedup               float64
		JobsPerSecond         float64 `json:"jobs_per_second"`
		PeakRSSMB             float64 `json:"peak_rss_mb"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	if rep.Jobs != 30 || rep.Replayed != 30 || rep.Pools != 3 || rep.VirtualSeconds < 1800 || rep.Speedup <= 1 ||
		rep.JobsPerSecond <= 0 || rep.PeakRSSMB <= 0 {
		t.Fatalf("report %+v", rep)
	}
	if code, _, errOut := runWithEnv(nil, "bench", "replay", "--jobs", "0"); code != 2 || !strings.Contains(errOut, "must be positive") {
		t.Fatalf("--jobs 0: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runWithEnv(nil, "bench", "--only", "pool-burst"); code != 2 || !strings.Contains(errOut, "the scenarios are pool_burst and cold_burst") {
		t.Fatalf("--only pool-burst: exit %d: %s", code, errOut)
	}
}

// A family of --timings that no runner launches, a typo most likely, is
// named before the replay: its timings would change nothing.
func TestSimulateNamesTimingsOfFamiliesNoRunnerLaunches(t *testing.T) {
	jobs := writeHistory(t, "small-x64")
	timings := writeFile(t, t.TempDir(), "timings.json", `{"families": {"t3": {"boot": "20s"}, "m7gg": {"boot": "40s"}}}`)
	code, _, errOut := runWithEnv(nil, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", jobs, "--timings", timings)
	if code != 0 || !strings.Contains(errOut, "warning: --timings "+timings+" sets the timings of families no runner launches in the simulation: m7gg (the runners launch ") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// bench keeps its SQLite state in a temporary file of its own: a path it
// would not use is refused rather than silently ignored.
func TestBenchRefusesAStorePathItWouldNotUse(t *testing.T) {
	code, _, errOut := runWithEnv(nil, "bench", "--store", "sqlite:///var/lib/bullpen/bullpen.db", "--jobs", "0")
	if code != 2 || !strings.Contains(errOut, "--store sqlite:///var/lib/bullpen/bullpen.db: bench keeps its SQLite state in a temporary file of its own") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	if code, _, errOut := runWithEnv(nil, "bench", "--store", "sqlite://", "--jobs", "0"); code != 2 || !strings.Contains(errOut, "--jobs must be positive") {
		t.Errorf("--store sqlite://: exit %d: %s", code, errOut)
	}
}

// history generate writes the same history for the same seed, in the
// format simulate reads.
func TestHistoryGenerateFeedsSimulate(t *testing.T) {
	args := []string{"history", "generate", "--config", "../../examples/runs-on.yml", "--pools", "small-x64,medium-x64", "--jobs", "20", "--days", "0.1", "--seed", "4"}
	code, first, errOut := runWithEnv(nil, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, again, _ := runWithEnv(nil, args...); again != first || strings.Count(first, "\n") != 20 {
		t.Fatalf("two runs with one seed differ, or not 20 lines:\n%s", first)
	}
	path := writeFile(t, t.TempDir(), "generated.jsonl", first)
	code, report, errOut := runWithEnv(nil, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", path)
	if code != 0 || !strings.Contains(report, "20 replayed") || !strings.Contains(report, "pool small-x64") {
		t.Fatalf("simulate on the generated history: exit %d: %s\n%s", code, errOut, report)
	}
	if code, _, errOut := runWithEnv(nil, "history", "generate", "--jobs", "5"); code != 2 || !strings.Contains(errOut, "give --pools") {
		t.Fatalf("without pools: exit %d: %s", code, errOut)
	}
}

// A configuration that serves none of the history's jobs does not come
// out of a comparison looking fast and cheap: the jobs each served are
// shown first, and a difference is pointed out.
func TestSimulateCompareShowsTheJobsEachServed(t *testing.T) {
	jobs := writeHistory(t, "small-x64")
	other := writeFile(t, t.TempDir(), "other.yml", `runners:
  small:
    cpu: 2
    ram: 4
    family: [t3]
    image: ubuntu-24.04
pools:
  elsewhere:
    runner: small
    schedule:
      - name: default
        hot: 1
`)
	out, _ := mustRun(t, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", jobs, "--compare", other)
	wantAll(t, "the comparison", out,
		"  served                     45       0     -45\n",
		"  no pool or runner           0      45     +45\n",
		"note: A and B served different jobs",
	)
}

// Each section of a comparison holds its figures under the A, B and B-A
// of its heading, and the jobs each configuration served by each way are
// counted among the jobs, not under the cost.
func TestSimulateCompareLinesUpItsColumns(t *testing.T) {
	report := func(served, byPool, cold, creates int) simulate.Report {
		var r simulate.Report
		r.Replayed, r.Environment = 40, "production"
		r.Simulated.QueueTime = demo.Latencies{Count: served, P50: 2, P90: 12.5, P99: 30, Max: 41}
		r.Simulated.QueueTimes = map[string]demo.Latencies{"pool": {Count: byPool}, "cold": {Count: cold}}
		r.Bill = simulate.Bill{Total: 12.5, PerJob: 0.3125, HotIdle: 3, PriceTable: "us-east-1 2026-11-01"}
		r.CloudCalls = map[string]int{"CreateFleet": creates, "TerminateInstances": creates}
		return r
	}
	var out strings.Builder
	printComparison(&out, "a.yml", "b.yml", report(40, 30, 10, 12), report(40, 38, 2, 4))
	text := out.String()
	// ends are where the last three fields of line end.
	ends := func(line string) []int {
		var at []int
		for i := range line {
			if line[i] != ' ' && (i+1 == len(line) || line[i+1] == ' ') {
				at = append(at, i+1)
			}
		}
		return at[max(len(at)-3, 0):]
	}
	var columns []int
	rows := 0
	for _, line := range strings.Split(text, "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 3 && strings.Join(fields[len(fields)-3:], " ") == "A B B-A" {
			columns = ends(line)
			continue
		}
		if len(fields) < 4 || columns == nil {
			continue
		}
		numbers := true
		for _, f := range fields[len(fields)-3:] {
			if _, err := strconv.ParseFloat(f, 64); err != nil {
				numbers = false
			}
		}
		if numbers {
			rows++
			if got := ends(line); !slices.Equal(got, columns) {
				t.Errorf("%q: figures end at %v, under a heading whose columns end at %v", line, got, columns)
			}
		}
	}
	if rows < 12 {
		t.Errorf("%d rows of figures, want every section's:\n%s", rows, text)
	}
	jobs, queue, cost := strings.Index(text, "\njobs "), strings.Index(text, "\nqueue time (s) "), strings.Index(text, "\ncost (USD) ")
	byPool := strings.Index(text, "    by pool                  30      38      +8\n")
	if jobs < 0 || byPool < jobs || byPool > queue || queue > cost {
		t.Errorf("the jobs served by a pool are not counted among the jobs:\n%s", text)
	}
	if !strings.Contains(text, "  CreateFleet                12       4      -8\n") {
		t.Errorf("the cloud calls are not counted:\n%s", text)
	}
}

// simulate and demo serve the environment --environment names, say which
// in their header, and refuse one no pool belongs to.
func TestSimulateAndDemoServeTheEnvironmentNamed(t *testing.T) {
	jobs := writeHistory(t, "small-x64")
	devOnly := writeFile(t, t.TempDir(), "dev.yml", "runners:\n  small: {image: ubuntu-24.04, family: [t3]}\npools:\n  small-x64:\n    environment: dev\n    runner: small\n")
	code, out, errOut := runWithEnv(nil, "simulate", "--config", devOnly, "--jobs", jobs, "--environment", "prod")
	if code != 2 || !strings.Contains(errOut, `--environment: no pool of the configuration belongs to environment "prod"`) {
		t.Errorf("simulate in an environment without pools: exit %d: %s%s", code, out, errOut)
	}
	code, out, errOut = runWithEnv(nil, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", jobs, "--environment", "dev")
	if code != 0 || !strings.Contains(out, "replayed (") || !strings.Contains(out, "by the pools of environment dev\n") {
		t.Errorf("simulate in dev: exit %d: %s%s", code, out, errOut)
	}
	if code, _, errOut := runWithEnv(nil, "demo", "--config", devOnly, "--environment", "prod", "--duration", "1m", "--speed", "0"); code != 2 || !strings.Contains(errOut, `belongs to environment "prod"`) {
		t.Errorf("demo in an environment without pools: exit %d: %s", code, errOut)
	}
}

// simulate sets the recorded queue times of the jobs it served against
// its own, counts the jobs GitHub's runners took apart, and says over
// which window the jobs ran and over which run the cost is reckoned.
func TestSimulateComparesTheJobsItServed(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pool.yml", "runners:\n  small: {image: ubuntu-24.04, ram: 1, family: [t3]}\npools:\n  p:\n    runner: small\n    schedule:\n      - name: default\n        hot: 2\n")
	path := filepath.Join(dir, "history.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(f)
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	job := func(id int64, labels string, at time.Time, wait time.Duration) {
		started, completed := at.Add(wait), at.Add(wait+2*time.Minute)
		if err := enc.Encode(history.Job{ID: id, RunID: 200 + id, Repo: "acme/app", Name: "build", Labels: []string{labels},
			Created: at, Started: &started, Completed: &completed, Conclusion: "success"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		job(int64(i+1), "ubuntu-latest", start.Add(time.Duration(i)*time.Minute), 90*time.Second)
	}
	job(11, "runs-on=211/pool=p", start.Add(2*time.Minute), 2*time.Second)
	job(12, "runs-on=212/pool=p", start.Add(5*time.Minute), 2*time.Second)
	f.Close()
	out, _ := mustRun(t, "simulate", "--config", cfg, "--jobs", path)
	wantAll(t, "the report", out,
		"12 jobs from 2026-11-23 10:00 to 2026-11-23 10:09, 2 replayed",
		"not for bullpen: 10",
		"  recorded                 2    2.0    2.0    2.0    2.0\n",
		"window: 2026-11-23 10:02:00 to 10:07:",
		"over the replay's run from the first arrival, 2026-11-23 10:02:00 to 10:07:30 (5m30s): it ended 28s after the window; the 5m0s of warm-up before it is not billed",
	)
	code, js, _ := runWithEnv(nil, "simulate", "--config", cfg, "--jobs", path, "--json")
	var rep struct {
		Replayed      int
		NotForBullpen int `json:"not_for_bullpen"`
		Window        struct{ From, To time.Time }
	}
	if code != 0 || json.Unmarshal([]byte(js), &rep) != nil || rep.Replayed != 2 || rep.NotForBullpen != 10 || !rep.Window.From.Equal(start.Add(2*time.Minute)) {
		t.Fatalf("json: exit %d, %+v\n%s", code, rep, js)
	}
}

// simulate --suggest plans a pool that autoscales no more hot instances
// than its block's max, which validate would refuse, and says in the
// suggestion that the plan wanted more and max should be raised.
func TestSimulateSuggestHoldsHotAtTheAutoscaleMax(t *testing.T) {
	if testing.Short() {
		t.Skip("several replays")
	}
	jobs := writeHistory(t, "p")
	cfg := writeFile(t, t.TempDir(), "autoscaled.yml", "runners:\n  small: {image: ubuntu24-full-x64, ram: 1, family: [t3]}\npools:\n  p:\n    environment: dev\n    runner: small\n"+
		"    schedule:\n      - name: default\n        hot: 1\n    autoscale:\n      max: 1\n")
	out, errOut := mustRun(t, "simulate", "--config", cfg, "--jobs", jobs, "--suggest", "--target-p90", "1s", "--rounds", "0")
	for _, want := range []string{"the plan wanted up to ", "above its autoscale block's max 1", "raise max to "} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
		if !strings.Contains(out, want) {
			t.Errorf("the suggestion lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "\n# Pool p: the plan wanted up to ") || !strings.Contains(errOut, "\npool p: the plan wanted up to ") {
		t.Errorf("the pool is not named, or the suggestion does not say it as a comment:\n%s\n%s", errOut, out)
	}
	file := writeFile(t, t.TempDir(), "suggested.yml", out)
	if code, vout, verr := runWithEnv(nil, "validate", file); code != 0 {
		t.Fatalf("validate refuses the suggestion: %s%s", vout, verr)
	}
}

// writeSlowT3Timings writes timings under which a t3 instance takes
// longer to warm than a launch is allowed: small-x64's cold starts never
// serve a job.
func writeSlowT3Timings(t *testing.T) string {
	t.Helper()
	path := writeFile(t, t.TempDir(), "timings.json", `{"families":{"t3":{"boot":"4m","warm_up":"2m"}}}`)
	return path
}

// The report counts the jobs no runner took by the replay's end, by pool,
// in its queue times: left out, a configuration too small to start them
// read as fast as one that served them all.
func TestSimulateReportsTheJobsThatNeverStarted(t *testing.T) {
	jobs := writeHistory(t, "small-x64")
	out, _ := mustRun(t, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", jobs, "--timings", writeSlowT3Timings(t))
	code, js, _ := runWithEnv(nil, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", jobs, "--timings", writeSlowT3Timings(t), "--json")
	var rep simulate.Report
	if code != 0 || json.Unmarshal([]byte(js), &rep) != nil {
		t.Fatalf("json: exit %d\n%s", code, js)
	}
	n := rep.Simulated.NotStarted["queued"] + rep.Simulated.NotStarted["assigned"]
	if n == 0 {
		t.Fatalf("every job started (%+v): the test needs some that did not", rep.Simulated.NotStarted)
	}
	wantAll(t, "the report", out,
		fmt.Sprintf("not started: %d jobs no runner had taken when the replay ended (pool small-x64 %d); jobs not started count as waiting until the replay's end", n, n),
		"p99    max not started\n",
		"  simulated               45 ",
		fmt.Sprintf("%11d\n", n),
		"per completed job",
	)
}

// A comparison counts each configuration's jobs that did not start, by
// pool, and its queue times count them as waiting until the replay's end.
func TestSimulateCompareCountsTheJobsThatNeverStarted(t *testing.T) {
	report := func(notStarted int, p90 float64) simulate.Report {
		var r simulate.Report
		r.Replayed, r.Environment = 40, "production"
		r.Simulated.QueueTime = demo.Latencies{Count: 40 - notStarted, P90: 12}
		r.Waits.All = simulate.Waited{Latencies: demo.Latencies{Count: 40, P90: p90}, NotStarted: notStarted}
		r.Waits.ByPool = map[string]simulate.Waited{"small": {NotStarted: notStarted}, "big": {}}
		return r
	}
	var out strings.Builder
	printComparison(&out, "a.yml", "b.yml", report(0, 12), report(25, 1800))
	text := out.String()
	wantAll(t, "the comparison", text,
		"  not started                 0      25     +25\n",
		"    pool small                0      25     +25\n",
		"  p90                      12.0  1800.0 +1788.0\n",
		"  note: jobs not started count as waiting until the replay's end",
	)
	if strings.Contains(text, "pool big") {
		t.Errorf("a pool whose jobs all started is listed among those that did not:\n%s", text)
	}
}

// Two overlapping exports concatenated replay each job once, and simulate
// says how many lines it dropped.
func TestSimulateSaysItDroppedRepeatedJobs(t *testing.T) {
	jobs := writeHistory(t, "small-x64")
	data, err := os.ReadFile(jobs)
	if err != nil {
		t.Fatal(err)
	}
	twice := filepath.Join(t.TempDir(), "twice.jsonl")
	if err := os.WriteFile(twice, append(data, data...), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runWithEnv(nil, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", twice, "--json")
	if code != 0 || !strings.Contains(errOut, twice+": 45 lines repeat an earlier line's job: dropped") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	var rep struct {
		Replayed int `json:"replayed"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Replayed != 45 {
		t.Fatalf("%d jobs replayed of 45 written twice (%v)", rep.Replayed, err)
	}
}

// A --compare file that does not load is refused before any replay: the
// replay through --config, cut short here by a cancelled context, would
// otherwise run first and end on its own error.
func TestSimulateRefusesABadCompareBeforeReplaying(t *testing.T) {
	jobs := writeHistory(t, "small-x64")
	bad := writeFile(t, t.TempDir(), "bad.yml", "pools:\n  p:\n    runner: nowhere\n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	code := run(ctx, e, []string{"simulate", "--config", "../../examples/runs-on.yml", "--jobs", jobs, "--compare", bad})
	if code != 1 || !strings.Contains(errb.String(), bad+" has ") || strings.Contains(errb.String(), "context canceled") || out.Len() != 0 {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, out.String(), errb.String())
	}
}
