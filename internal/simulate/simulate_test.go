package simulate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/demo"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/history"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

// exampleData is examples/runs-on.yml as it is on disk.
func exampleData(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../examples/runs-on.yml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func example(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse("runs-on.yml", exampleData(t))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// historyOf turns the simulated GitHub's record of a run into a history
// file's jobs.
func historyOf(stream []ghsim.JobRecord) []history.Job {
	var out []history.Job
	for _, r := range stream {
		j := history.Job{ID: r.ID, RunID: r.RunID, RunAttempt: 1, Repo: r.Repo, Workflow: r.Workflow, Name: r.Name,
			Labels: r.Labels, Created: r.CreatedAt, Conclusion: r.Conclusion, RunnerName: r.RunnerName}
		if !r.StartedAt.IsZero() {
			started, completed := r.StartedAt, r.CompletedAt
			j.Started, j.Completed = &started, &completed
		}
		out = append(out, j)
	}
	return out
}

// The honesty check: the job stream `bullpen demo` generates, replayed
// through simulate from the same start, gives the demo's own queue times.
func TestReplayOfTheDemoGivesTheDemosFigures(t *testing.T) {
	cfg := example(t)
	start := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	res, err := demo.Run(context.Background(), demo.Options{Config: cfg, Duration: 30 * time.Minute, Start: start,
		JobsPerMinute: 4, Seed: 7, Latency: demo.DefaultLatency})
	if err != nil {
		t.Fatal(err)
	}
	jobs := historyOf(res.Stream)
	if len(jobs) < 40 {
		t.Fatalf("the demo generated %d jobs", len(jobs))
	}
	rep, err := simulate.Run(context.Background(), simulate.Options{Config: cfg, Jobs: jobs, Seed: 7,
		Lead: jobs[0].Created.Sub(start)})
	if err != nil {
		t.Fatal(err)
	}
	// The run is deterministic, and the replay queues the same jobs at
	// the same instants: it gives the demo's figures exactly.
	if got, want := rep.Simulated.QueueTimes, res.Jobs.QueueTimes; !reflect.DeepEqual(got, want) || rep.Simulated.QueueTime != res.Jobs.QueueTime {
		t.Errorf("queue times: replay %+v, demo %+v (overall: replay %+v, demo %+v)", got, want, rep.Simulated.QueueTime, res.Jobs.QueueTime)
	}
	// Pool jobs are told apart by the member that served them.
	q := rep.Simulated.QueueTimes
	if q["hot"].Count == 0 || q["stopped"].Count == 0 || q["hot"].Count+q["stopped"].Count != q["pool"].Count ||
		q["hot"].P50 >= q["stopped"].P50 {
		t.Errorf("pool jobs %+v: want them split into hot %+v and stopped %+v members, the hot ones quicker", q["pool"], q["hot"], q["stopped"])
	}
	if rep.Replayed != len(jobs) || rep.Simulated.ByStatus["completed"] != len(jobs) {
		t.Errorf("%d of %d jobs replayed, %d completed", rep.Replayed, len(jobs), rep.Simulated.ByStatus["completed"])
	}
	busy := 0.0
	for _, h := range rep.InstanceHours {
		if h.State == "busy" {
			busy += h.Hours
		}
	}
	// The jobs ran 1 to 3 minutes each; an instance is busy a little longer.
	if min := float64(len(jobs)) / 60; busy < min || rep.Bill.Total <= 0 || rep.Bill.PerJob <= 0 || len(rep.Bill.Unpriced) > 0 {
		t.Errorf("%.2f busy instance-hours (want at least %.2f), bill %+v", busy, min, rep.Bill)
	}
}

// Jobs whose labels no pool or runner serves are counted and named, not
// dropped silently.
func TestUnservedLabelsAreReported(t *testing.T) {
	cfg := example(t)
	at := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	started, done := at.Add(5*time.Second), at.Add(time.Minute)
	jobs := []history.Job{
		{ID: 1, RunID: 11, Repo: "acme/app", Labels: []string{"runs-on=11/pool=nope"}, Created: at, Started: &started, Completed: &done},
		{ID: 2, RunID: 12, Repo: "acme/app", Labels: []string{"runs-on=12/pool=small-x64"}, Created: at, Started: &started, Completed: &done},
		{ID: 3, RunID: 13, Repo: "acme/app", Labels: []string{"runs-on=13/pool=nope"}, Created: at, Started: &started, Completed: &done},
	}
	var calls, arrived, total int
	progress := func(_ time.Time, a, n int) { calls, arrived, total = calls+1, a, n }
	rep, err := simulate.Run(context.Background(), simulate.Options{Config: cfg, Jobs: jobs, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 || arrived != 3 || total != 3 {
		t.Errorf("progress told %d times, last %d of %d jobs arrived; want every cycle, ending with 3 of 3", calls, arrived, total)
	}
	// The jobs of two runs asking for the same missing pool count together.
	u, ok := rep.Simulated.Unserved["runs-on=<run>/pool=nope"]
	if !ok || u.Jobs != 2 || u.Reason == "" || len(rep.Simulated.Unserved) != 1 {
		t.Fatalf("unserved: %+v", rep.Simulated.Unserved)
	}
	if rep.Simulated.ByStatus["completed"] != 1 {
		t.Errorf("by status %v, want the pool job completed", rep.Simulated.ByStatus)
	}
}

// A replay is deterministic: the same history, configuration and seed give
// the same report to the byte, however many threads run it, although
// provisioning waits for machines in tasks of its own while the loops,
// the simulated machines and agents act on their timers.
func TestTheSameReplayGivesTheSameReport(t *testing.T) {
	cfg := example(t)
	jobs := simulate.Generate(simulate.Workload{Jobs: 60, Days: 1.0 / 24, Seed: 5,
		Pools: []string{"small-x64", "medium-x64", "burst-x64", "dependabot"}, Start: time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)})
	var first []byte
	for _, threads := range []int{4, 1} {
		prev := runtime.GOMAXPROCS(threads)
		rep, err := simulate.Run(context.Background(), simulate.Options{Config: cfg, Jobs: jobs, Seed: 5})
		runtime.GOMAXPROCS(prev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.MarshalIndent(rep, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = got
			if rep.Simulated.ByStatus["completed"] < 50 {
				t.Fatalf("%d jobs completed; want most of %d", rep.Simulated.ByStatus["completed"], len(jobs))
			}
			continue
		}
		if !bytes.Equal(got, first) {
			t.Fatalf("on %d threads the report differs from the first run's:\n%s\nfirst:\n%s", threads, got, first)
		}
	}
}
