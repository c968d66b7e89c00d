package appplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
)

// TestTimeline runs the standalone autoscaler with Run on a virtual clock,
// bullpen's default parameters (60 s polls, half-life 120 s, threshold
// 1.5, cooldowns 60 s up and 180 s down, MIN 1, MAX 5), against fakes of
// both APIs: demand rises, the worker scales up through the up cooldown
// (with another writer changing the spec in the middle of one update),
// jobs run on the deployment's runners and complete, demand falls, and
// the worker scales down one step per down cooldown to MIN_INSTANCES.
// Jobs that do not ask for self-hosted runners, and jobs running on
// runners without the prefix, never count; the job lists paginate.
func TestTimeline(t *testing.T) {
	r := newRig(t, nil)
	r.gh.PageSize(2) // runs and jobs come two per page

	// Noise that must never count: a job for GitHub-hosted runners, and a
	// self-hosted job running on another deployment's runner.
	r.gh.QueueJob(testRepo, []string{"ubuntu-latest"})
	other := r.gh.QueueJob(testRepo, []string{"self-hosted", "gpu"})
	must(t, r.gh.StartJob(other.ID, "other-pool-1"))
	// Dead runners: only the prefixed, offline, idle one goes.
	r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: testPrefix + "crashed"})
	r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: "other-pool-9"})
	r.gh.AddRunner(fakegh.RunnerSpec{Scope: repoScope, Name: testPrefix + "online", Online: true})

	r.reg = prometheus.NewRegistry() // the scaler newRig made keeps the first one
	s := runTimeline(t, r, timelineSteps(t, r))
	checkTimelineMetrics(t, r, s)
	checkPaginated(t, r)
	checkDecisionLevels(t, r.logs.String())
	r.noSecrets()
}

// checkDecisionLevels: a decision that scales is INFO; one that changes
// nothing, the steady state, is DEBUG.
func checkDecisionLevels(t *testing.T, logs string) {
	t.Helper()
	seen := map[string]int{}
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `msg="autoscaler decision"`) {
			continue
		}
		level := "level=INFO"
		if strings.Contains(line, "action=none") {
			level = "level=DEBUG"
		}
		if !strings.Contains(line, level) {
			t.Errorf("want %s: %s", level, line)
		}
		seen[level]++
	}
	if seen["level=INFO"] == 0 || seen["level=DEBUG"] == 0 {
		t.Errorf("decisions logged by level: %v; want both kinds", seen)
	}
}

// timelineStep is one poll of TestTimeline: do runs before it, then the
// cycle must see demand and current and decide action, leaving new.
type timelineStep struct {
	t       int // seconds since start
	do      func()
	demand  int
	current int
	action  string
	new     int
}

func timelineSteps(t *testing.T, r *rig) []timelineStep {
	var jobs []domain.GitHubJob
	return []timelineStep{
		{0, nil, 0, 1, "none", 1}, // a down breach, but already at MIN
		{60, func() {
			// Six self-hosted jobs: three in one run, three alone, one
			// of them labelled in another case.
			first := r.gh.QueueJob(testRepo, []string{"self-hosted", "linux"})
			jobs = append(jobs, first,
				r.gh.QueueJob(testRepo, []string{"self-hosted"}, fakegh.InRun(first.RunID)),
				r.gh.QueueJob(testRepo, []string{"linux", "self-hosted"}, fakegh.InRun(first.RunID)),
				r.gh.QueueJob(testRepo, []string{"Self-Hosted", "linux"}))
			jobs = append(jobs, r.queue(2)...)
		}, 6, 1, "none", 1}, // one up breach: score 1.0
		{120, func() {
			// Someone resizes the worker between our read and our write.
			r.do.AfterGet(r.appID, setWorkerField("runner", "instance_size_slug", "apps-s-2vcpu-4gb"))
		}, 6, 1, "up", 3}, // score 1.707: step min(int(5×0.5+0.5), 2) = 2
		{180, func() { startJobs(t, r, jobs[:3]) }, 6, 3, "up", 5}, // up cooldown over exactly at 60 s
		{240, func() { startJobs(t, r, jobs[3:]); r.do.Deploy(r.appID) }, 6, 5, "none", 5},
		{300, func() { completeJobs(t, r, jobs) }, 0, 5, "none", 5},
		{360, nil, 0, 5, "down", 4},
		{420, nil, 0, 4, "none", 4}, // down cooldown
		{480, nil, 0, 4, "none", 4},
		{540, nil, 0, 4, "down", 3},
		{600, nil, 0, 3, "none", 3},
		{660, nil, 0, 3, "none", 3},
		{720, nil, 0, 3, "down", 2},
		{780, nil, 0, 2, "none", 2},
		{840, nil, 0, 2, "none", 2},
		{900, nil, 0, 2, "down", 1},
		{960, nil, 0, 1, "none", 1}, // at MIN_INSTANCES
	}
}

// runTimeline drives a Scaler's Run through the steps on the virtual
// clock and checks each cycle's report; it returns the scaler.
func runTimeline(t *testing.T, r *rig, steps []timelineStep) *Scaler {
	t.Helper()
	reports := make(chan CycleReport, 1)
	errs := make(chan error, 1)
	s := r.newScaler(func(rep CycleReport, err error) {
		if err != nil {
			errs <- err
		}
		reports <- rep
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	for i, st := range steps {
		if i > 0 {
			r.clk.BlockUntil(1) // Run is waiting for its next poll
			if st.do != nil {
				st.do()
			}
			r.clk.Advance(time.Duration(st.t-steps[i-1].t) * time.Second)
		}
		var rep CycleReport
		select {
		case err := <-errs:
			t.Fatalf("t=%d: cycle failed: %v", st.t, err)
		case rep = <-reports:
		}
		checkReport(t, r, st, rep)
	}
	cancel()
	r.clk.Advance(time.Minute) // in case Run is between the cycle and its wait
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	return s
}

func checkReport(t *testing.T, r *rig, st timelineStep, rep CycleReport) {
	t.Helper()
	if got := int(rep.At.Sub(epoch) / time.Second); got != st.t {
		t.Fatalf("cycle at t=%d, want t=%d", got, st.t)
	}
	if rep.Demand.Total() != st.demand || rep.Current != st.current || rep.Decision.Action != st.action || rep.New != st.new {
		t.Fatalf("t=%d: demand %d current %d action %s new %d, want %d %d %s %d (%s)",
			st.t, rep.Demand.Total(), rep.Current, rep.Decision.Action, rep.New, st.demand, st.current, st.action, st.new, rep.Decision.Reason)
	}
	if got := r.count(); got != st.new {
		t.Fatalf("t=%d: the app spec says %d instances, want %d", st.t, got, st.new)
	}
	checkStep(t, r, st.t, rep)
}

// checkStep checks what particular steps of the timeline must show.
func checkStep(t *testing.T, r *rig, at int, rep CycleReport) {
	t.Helper()
	switch at {
	case 0:
		// Offline at one poll may be a runner registering or restarting:
		// only one still offline at the next poll, and DeadRunnerAge
		// (2 min) after it was first seen so, is deleted.
		if rep.Offline != 1 || rep.Dead != 0 || len(rep.Deleted) != 0 {
			t.Fatalf("t=0: runners seen offline %d, dead %d, deleted %q; want one seen, none deleted", rep.Offline, rep.Dead, rep.Deleted)
		}
	case 60:
		if rep.Demand.Queued != 6 || rep.Demand.InProgress != 0 {
			t.Fatalf("t=60: demand %+v, want 6 queued", rep.Demand)
		}
		if rep.Offline != 1 || rep.Dead != 0 || len(rep.Deleted) != 0 {
			t.Fatalf("t=60: runners seen offline %d, dead %d, deleted %q; want one seen, none deleted before 2 min", rep.Offline, rep.Dead, rep.Deleted)
		}
	case 120:
		if !slices.Equal(rep.Deleted, []string{testPrefix + "crashed"}) || rep.Dead != 1 {
			t.Fatalf("t=120: dead runners %d, deleted %q; want only %s", rep.Dead, rep.Deleted, testPrefix+"crashed")
		}
		names := runnerNames(r.gh.Runners())
		if !slices.Equal(names, []string{testPrefix + "online", "other-pool-9"}) {
			t.Fatalf("t=120: runners left %q", names)
		}
		if len(rep.Conflicts) == 0 {
			t.Fatal("t=120: the concurrent spec change was not noticed")
		}
		if got := r.workerField("runner", "instance_size_slug"); got != "apps-s-2vcpu-4gb" {
			t.Fatalf("t=120: the other writer's change was clobbered: instance_size_slug %v", got)
		}
		checkOnlyCountChanged(t, r, 3)
	case 180:
		if rep.Demand.Queued != 3 || rep.Demand.InProgress != 3 {
			t.Fatalf("t=180: demand %+v, want 3 queued and 3 in progress", rep.Demand)
		}
	}
}

// checkOnlyCountChanged checks that the last update wrote the spec as it
// stood, with only the runner worker's instance_count changed.
func checkOnlyCountChanged(t *testing.T, r *rig, n int) {
	t.Helper()
	updates := r.do.Updates()
	if len(updates) == 0 {
		t.Fatal("no update was made")
	}
	got := updates[len(updates)-1]
	want := r.do.Spec(r.appID)
	setWorkerField("runner", "instance_count", json.Number(fmt.Sprint(n)))(want)
	if canonical(got) != canonical(want) {
		t.Fatalf("update changed more than instance_count:\n got %s\nwant %s", canonical(got), canonical(want))
	}
	if got["future_setting"] == nil {
		t.Fatal("a field godo does not model was dropped")
	}
}

func checkTimelineMetrics(t *testing.T, r *rig, s *Scaler) {
	t.Helper()
	checks := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"decisions up", s.m.decisions.WithLabelValues("up"), 2},
		{"decisions down", s.m.decisions.WithLabelValues("down"), 4},
		{"decisions none", s.m.decisions.WithLabelValues("none"), 11},
		{"instances", s.m.instances, 1},
		{"queued demand", s.m.demand.WithLabelValues("queued"), 0},
		{"cycles ok", s.m.cycles.WithLabelValues("ok"), 17},
		{"dead runners deleted", s.m.deleted, 1},
		{"spec conflicts", s.m.conflicts, 1},
	}
	for _, c := range checks {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	n, err := testutil.GatherAndCount(r.reg, "bullpen_appplatform_decisions_total", "bullpen_appplatform_demand_jobs",
		"bullpen_appplatform_instances", "bullpen_appplatform_api_errors_total")
	if err != nil || n != 3+2+1 { // no API errors in this timeline
		t.Errorf("registered series: %d, %v", n, err)
	}
}

func startJobs(t *testing.T, r *rig, jobs []domain.GitHubJob) {
	t.Helper()
	for _, j := range jobs {
		must(t, r.gh.StartJob(j.ID, fmt.Sprintf("%s%d", testPrefix, j.ID%1000)))
	}
}

func completeJobs(t *testing.T, r *rig, jobs []domain.GitHubJob) {
	t.Helper()
	for _, j := range jobs {
		must(t, r.gh.CompleteJob(j.ID, "success"))
	}
}

func runnerNames(rs []domain.GitHubRunner) []string {
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkPaginated checks that both the run list and a run's job list were
// read past their first page.
func checkPaginated(t *testing.T, r *rig) {
	t.Helper()
	var runs, jobs bool
	for _, req := range r.gh.Requests() {
		path, query, _ := strings.Cut(req, "?")
		if !strings.Contains("&"+query, "&page=2") {
			continue
		}
		runs = runs || strings.HasSuffix(path, "/actions/runs")
		jobs = jobs || strings.HasSuffix(path, "/jobs")
	}
	if !runs || !jobs {
		t.Fatalf("second pages read: runs %v, jobs %v", runs, jobs)
	}
}
