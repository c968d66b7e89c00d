package simulate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
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
		{ID: 1, RunID: 11, Repo: "acme/app", Labels: []string{"runs-on=11/pool=nope/env=dev"}, Created: at, Started: &started, Completed: &done},
		{ID: 2, RunID: 12, Repo: "acme/app", Labels: []string{"runs-on=12/pool=small-x64/env=dev"}, Created: at, Started: &started, Completed: &done},
		{ID: 3, RunID: 13, Repo: "acme/app", Labels: []string{"runs-on=13/pool=nope/env=dev"}, Created: at, Started: &started, Completed: &done},
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
	u, ok := rep.Simulated.Unserved["runs-on=<run>/pool=nope/env=dev"]
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
	jobs := simulate.Generate(simulate.Workload{Jobs: 60, Days: 1.0 / 24, Seed: 5, Environment: "dev",
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

// onePool is a configuration of one pool of two hot machines, for every
// environment.
func onePool(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse("p.yml", fmt.Appendf(nil, propertyConfig, 2))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ranJob is a job of the history queued at at, started after wait and
// running for took.
func ranJob(id int64, labels []string, at time.Time, wait, took time.Duration) history.Job {
	started, completed := at.Add(wait), at.Add(wait+took)
	return history.Job{ID: id, RunID: 700 + id, Repo: "acme/app", Name: "test", Labels: labels, Created: at,
		Started: &started, Completed: &completed, Conclusion: "success"}
}

// The recorded queue times are those of the jobs the replay served: jobs
// GitHub's own runners took (which the intake leaves alone) and jobs the
// replay refused are counted apart, not set against bullpen's.
func TestRecordedQueueTimesAreThoseOfTheJobsServed(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	var jobs []history.Job
	for i := range 10 {
		jobs = append(jobs, ranJob(int64(i+1), []string{"ubuntu-latest"}, at.Add(time.Duration(i)*time.Minute), 90*time.Second, 2*time.Minute))
	}
	jobs = append(jobs,
		ranJob(11, []string{"runs-on=711/pool=p"}, at.Add(2*time.Minute), 2*time.Second, 2*time.Minute),
		ranJob(12, []string{"runs-on=712/pool=p"}, at.Add(5*time.Minute), 2*time.Second, 2*time.Minute),
		ranJob(13, []string{"runs-on=713/pool=nope"}, at.Add(6*time.Minute), 30*time.Second, 2*time.Minute),
		history.Job{ID: 14, RunID: 714, Repo: "acme/app", Labels: []string{"runs-on=714/pool=p"}, Created: at.Add(7 * time.Minute)}, // cancelled while queued
	)
	rep, err := simulate.Run(context.Background(), simulate.Options{Config: onePool(t), Jobs: jobs, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Jobs != 14 || rep.NotRun != 1 || rep.NotForBullpen != 10 || rep.Replayed != 3 {
		t.Errorf("%d jobs: %d not run, %d not for bullpen, %d replayed; want 14: 1, 10, 3", rep.Jobs, rep.NotRun, rep.NotForBullpen, rep.Replayed)
	}
	if rep.Simulated.QueueTime.Count != 2 || rep.Simulated.Unserved["runs-on=<run>/pool=nope"].Jobs != 1 {
		t.Fatalf("simulated: %d served, unserved %+v; want the 2 pool jobs served, the third refused", rep.Simulated.QueueTime.Count, rep.Simulated.Unserved)
	}
	if want := (demo.Latencies{Count: 2, P50: 2, P90: 2, P99: 2, Max: 2}); rep.Recorded != want {
		t.Errorf("recorded %+v, want the 2 served pool jobs' %+v", rep.Recorded, want)
	}
}

// A replay bills from the first arrival to the first converger cycle after
// its last job ended: not the warm-up lead before it, nor the tail it may
// run after the history's last completion, so that a long job at the start
// and short ones after bill no time past the long job's end, whatever the
// tail, and though GitHub's own runners take a job an hour later. It
// reports the window its jobs span.
func TestAReplayBillsFromTheFirstArrivalToTheLastCompletion(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	jobs := []history.Job{ranJob(1, []string{"runs-on=701/pool=p"}, at, 2*time.Second, 4*time.Hour)}
	for i := range 20 {
		jobs = append(jobs, ranJob(int64(i+2), []string{fmt.Sprintf("runs-on=%d/pool=p", 702+i)}, at.Add(time.Duration(2*i)*time.Minute), 2*time.Second, 2*time.Minute))
	}
	jobs = append(jobs, ranJob(99, []string{"ubuntu-latest"}, at.Add(5*time.Hour), time.Minute, time.Minute))
	const lead, interval = 5 * time.Minute, 30 * time.Second
	replay := func(tail time.Duration) simulate.Report {
		t.Helper()
		rep, err := simulate.Run(context.Background(), simulate.Options{Config: onePool(t), Jobs: jobs, Seed: 1, Lead: lead, Tail: tail, Interval: interval})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := replay(15 * time.Minute)
	if rep.Simulated.ByStatus["completed"] != 21 || rep.NotForBullpen != 1 {
		t.Fatalf("by status %v, %d not for bullpen: want the 21 pool jobs completed, the hosted one apart", rep.Simulated.ByStatus, rep.NotForBullpen)
	}
	// The long job starts when a runner takes it and runs four hours.
	if served := rep.Window.To.Sub(at.Add(4 * time.Hour)); rep.Window.From != at || served < 0 || served > time.Minute {
		t.Errorf("window %s to %s, want from the first arrival to the long job's end, four hours and its queue time later", rep.Window.From, rep.Window.To)
	}
	if rep.Start != at.Add(-lead) || rep.Run.From != at || rep.Run.To.Before(rep.Window.To) || rep.Run.To.Sub(rep.Window.To) > interval {
		t.Errorf("the replay began %s and billed %s to %s, want the lead before %s, and from then to the first cycle after the last completion, %s",
			rep.Start, rep.Run.From, rep.Run.To, at, rep.Window.To)
	}
	long := replay(3 * time.Hour)
	if long.Run != rep.Run || !reflect.DeepEqual(long.InstanceHours, rep.InstanceHours) || long.Bill.Total != rep.Bill.Total {
		t.Errorf("with a 3-hour tail the replay billed %s to %s for %.2f, with 15 minutes %s to %s for %.2f: the tail is not billed",
			long.Run.From, long.Run.To, long.Bill.Total, rep.Run.From, rep.Run.To, rep.Bill.Total)
	}
}

// A history none of whose jobs is for the environment's bullpen is
// refused, saying why, rather than replayed to empty figures.
func TestAHistoryWithNoJobForBullpenIsRefused(t *testing.T) {
	cfg, err := config.Parse("dev.yml", []byte("runners:\n  small: {image: ubuntu24-full-x64, ram: 1, family: [t3]}\npools:\n  p:\n    environment: dev\n    runner: small\n"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	jobs := []history.Job{
		ranJob(1, []string{"ubuntu-latest"}, at, time.Second, time.Minute),
		ranJob(2, []string{"runs-on=702/pool=p"}, at, time.Second, time.Minute),
	}
	_, err = simulate.Run(context.Background(), simulate.Options{Config: cfg, Jobs: jobs})
	for _, want := range []string{"nothing to replay: of 2 jobs, 0 never ran to completion and 2 are not for bullpen in environment dev", "a job without an env= label is production's"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
	}
}
