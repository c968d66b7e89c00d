package intake

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestQueuedJobIsRecordedAndSentToItsQueue(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		labels []string
		queue  string
		route  domain.Route
		pool   string
		runner string // prefix
	}{
		{"pool label", poolLabels(700), domain.QueuePool, domain.RoutePool, "small-x64", "small-x64"},
		{"cold-start label", launchLabels(700), domain.QueueLaunch, domain.RouteLaunch, "", "adhoc-"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.deliver(jobEvent{action: "queued", id: 1001, runID: 700, labels: c.labels})
			if n := f.step(); n != 1 {
				t.Fatalf("step handled %d messages, want 1", n)
			}
			j := f.Job(1001)
			type fields struct {
				ID, RunID            int64
				RunAttempt           int
				Repo, Name, Workflow string
				Status               domain.JobStatus
				Route                domain.Route
				Pool                 string
				Version              int64
			}
			want := fields{1001, 700, 1, "acme/widgets", "build", "CI", domain.JobQueued, c.route, c.pool, 1}
			got := fields{j.ID, j.RunID, j.RunAttempt, j.Repo, j.Name, j.Workflow, j.Status, j.Route, j.Pool, j.Version}
			if got != want || !slices.Equal(j.Labels, c.labels) || j.Reason != "" || !strings.HasPrefix(j.Runner, c.runner) || j.Spec.Image == "" {
				t.Fatalf("job %+v\nwant %+v, labels %q, runner %s…", j, want, c.labels, c.runner)
			}
			if !j.QueuedAt.Equal(createdAt) {
				t.Errorf("queued at %v, want the payload's created_at %v", j.QueuedAt, createdAt)
			}
			other := domain.QueueLaunch
			if c.queue == domain.QueueLaunch {
				other = domain.QueuePool
			}
			f.wantQueued(c.queue, 1001)
			if s := f.Stats(other); s != (domain.QueueStats{}) {
				t.Errorf("%s queue holds %+v, want nothing", other, s)
			}
			f.inboxEmpty()
			f.wantEvents("queued", string(c.route), 1)
		})
	}
}

func TestJobsThatAreNotOursAreIgnored(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		"GitHub-hosted (the example's own labels)": nil,
		"self-hosted without runs-on":              {"self-hosted", "linux"},
		"another environment's pool":               {"runs-on=5/pool=small-x64/env=prod"},
	}
	for name, labels := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.deliver(jobEvent{action: "queued", id: 2001, runID: 5, labels: labels})
			f.step()
			f.noJob(2001)
			f.inboxEmpty()
			if n := f.writes.createCall; len(n) != 0 {
				t.Errorf("CreateJobs called %v, want never", n)
			}
			if s := f.sends.sent(domain.QueuePool) + f.sends.sent(domain.QueueLaunch); s != 0 {
				t.Errorf("%d sends, want none", s)
			}
			f.wantEvents("queued", "not_ours", 1)
		})
	}
}

// With a dev and a production stack on one configuration file, a job is
// one stack's: the other records nothing, sends nothing, and with
// --cancel-rejected cancels nothing. A job without env= is production's.
func TestAnotherEnvironmentsJobIsNeitherServedNorCancelled(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		env    string
		labels []string
	}{
		"a dev pool with env=dev, at production":        {"production", []string{"runs-on=5/pool=small-dev/env=dev"}},
		"a pool job without env=, at dev":               {"dev", poolLabels(5)},
		"a cold-start job without env=, at dev":         {"dev", launchLabels(5)},
		"an unknown pool without env=, at dev":          {"dev", []string{"runs-on=5/pool=large-arm"}},
		"a malformed label with env=dev, at production": {"production", []string{"runs-on=5/cpu=four/env=dev"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.in.Routing = func() Routing {
				r := fixtureRouting()
				r.Environment = c.env
				return r
			}
			f.deliver(jobEvent{action: "queued", id: 2101, runID: 5, labels: c.labels})
			f.step()
			f.noJob(2101)
			f.inboxEmpty()
			if s := f.sends.sent(domain.QueuePool) + f.sends.sent(domain.QueueLaunch); s != 0 {
				t.Errorf("%d sends, want none", s)
			}
			if got := f.gh.cancelled(); len(got) != 0 {
				t.Errorf("CancelRun calls %v, want none", got)
			}
			if l := f.logs.Lines("level=WARN"); len(l) != 0 {
				t.Errorf("warnings %q, want none", l)
			}
			f.wantEvents("queued", "not_ours", 1)
			f.wantEvents("queued", "rejected", 0)
		})
	}
}

// A job of this stack's environment naming another environment's pool is
// rejected with the env= label it lacks: the pool's own stack leaves it
// alone as another environment's job, so a quiet "not ours" would leave it
// queued until GitHub drops it.
func TestAJobForAnotherEnvironmentsPoolIsRejectedWithTheLabelItLacks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.deliver(jobEvent{action: "queued", id: 2102, runID: 6, labels: []string{"runs-on=6/pool=small-dev"}})
	f.step()
	j := f.Job(2102)
	if j.Status != domain.JobRejected || j.Pool != "small-dev" || !strings.Contains(j.Reason, "add env=dev") {
		t.Fatalf("job %s pool %q reason %q; want rejected, saying to add env=dev", j.Status, j.Pool, j.Reason)
	}
	f.wantEvents("queued", "rejected", 1)
}

func TestUnknownPoolIsRejected(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.deliver(jobEvent{action: "queued", id: 3001, runID: 31, labels: []string{"runs-on=31/pool=large-arm"}})
	f.step()
	j := f.Job(3001)
	if j.Status != domain.JobRejected || j.Pool != "large-arm" ||
		!strings.Contains(j.Reason, `pool "large-arm"`) || !strings.Contains(j.Reason, `environment "production"`) {
		t.Fatalf("job %s pool %q reason %q; want rejected naming the pool and the environment", j.Status, j.Pool, j.Reason)
	}
	if l := f.logs.Lines("level=WARN", "job rejected", "job=3001", `large-arm`); len(l) != 1 {
		t.Errorf("want one WARN naming the job and the pool, got %q", l)
	}
	f.wantEvents("queued", "rejected", 1)
	if s := f.Stats(domain.QueuePool).Visible + f.Stats(domain.QueueLaunch).Visible; s != 0 {
		t.Errorf("%d jobs sent to be served, want none", s)
	}
	// Its run is the reaper's to cancel, once a grace in which a
	// reload may serve it is over.
	var want []cancelCall
	if got := f.gh.cancelled(); !slices.Equal(got, want) {
		t.Errorf("CancelRun calls %v, want %v", got, want)
	}
	f.inboxEmpty()

	// A redelivery is a duplicate: no second warning, count or cancel.
	f.deliver(jobEvent{action: "queued", id: 3001, runID: 31, labels: []string{"runs-on=31/pool=large-arm"}})
	f.step()
	if l := f.logs.Lines("job rejected"); len(l) != 1 || f.events("queued", "rejected") != 1 || len(f.gh.cancelled()) != len(want) {
		t.Errorf("redelivery: %d warnings, %v counted, %d cancels", len(l), f.events("queued", "rejected"), len(f.gh.cancelled()))
	}
}

func TestRedeliveredQueuedEventCreatesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ev := jobEvent{action: "queued", id: 4001, runID: 41, labels: poolLabels(41)}
	f.deliver(ev)
	f.step()
	first := f.Job(4001)

	f.Clock.Advance(time.Minute)
	f.deliver(ev) // GitHub's redelivery: same payload, new delivery id
	f.step()
	if again := f.Job(4001); again.Version != first.Version || !again.UpdatedAt.Equal(first.UpdatedAt) {
		t.Fatalf("redelivery changed the job: version %d -> %d", first.Version, again.Version)
	}
	if n := f.sends.sent(domain.QueuePool); n != 2 {
		t.Errorf("%d sends to the pool queue, want 2 (the second deduplicated)", n)
	}
	f.wantQueued(domain.QueuePool, 4001)
	f.wantEvents("queued", "duplicate", 1)
	f.inboxEmpty()
}

func TestDuplicatesWithinOneBatchMakeOneJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ev := jobEvent{action: "queued", id: 4002, runID: 42, labels: poolLabels(42)}
	f.deliver(ev)
	f.deliver(ev)
	if n := f.step(); n != 2 {
		t.Fatalf("step handled %d, want both deliveries", n)
	}
	if j := f.Job(4002); j.Version != 1 {
		t.Fatalf("job version %d, want 1", j.Version)
	}
	f.wantQueued(domain.QueuePool, 4002)
	f.inboxEmpty()
}

func TestQueuedEventDoesNotReopenAJob(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		move func(*domain.Job)
	}{
		{"assigned", func(j *domain.Job) { j.Status, j.InstanceID = domain.JobAssigned, "i-1" }},
		{"running", func(j *domain.Job) { j.Status, j.InstanceID = domain.JobRunning, "i-1" }},
		{"completed", func(j *domain.Job) { j.Status, j.Conclusion = domain.JobCompleted, "success" }},
		{"requeued", func(j *domain.Job) { j.Status, j.Attempts, j.Reason = domain.JobQueued, 1, "instance failed" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			ev := jobEvent{action: "queued", id: 5001, runID: 51, labels: poolLabels(51)}
			f.deliver(ev)
			f.step()
			moved := f.setJob(5001, c.move)
			sends := f.sends.sent(domain.QueuePool)
			// Past the dedup window: only the intake's own choice can keep
			// the job out of the queue now.
			f.Clock.Advance(10 * time.Minute)
			f.queued(domain.QueuePool)

			f.deliver(ev)
			f.step()
			if j := f.Job(5001); j.Version != moved.Version || j.Status != moved.Status {
				t.Fatalf("job %s v%d, want it left %s v%d", j.Status, j.Version, moved.Status, moved.Version)
			}
			wantSends := sends
			if moved.Status == domain.JobQueued {
				wantSends++ // still waiting for a runner: sent again, with its attempt's dedup id
			}
			if n := f.sends.sent(domain.QueuePool); n != wantSends {
				t.Errorf("%d sends to the pool queue, want %d", n, wantSends)
			}
			f.inboxEmpty()
		})
	}
}

// instance records a pool member bound to job id, in state.
func (f *fixture) instance(id string, state domain.State, job int64) {
	f.T.Helper()
	in := domain.Instance{ID: id, CloudID: "cloud-" + id, Pool: "small-x64", Role: domain.RoleHot, Runner: "small-x64",
		State: state, Job: domain.JobKey(job)}
	if err := f.Store.CreateInstances(f.Ctx, []domain.Instance{in}); err != nil {
		f.T.Fatal(err)
	}
}

func TestInProgressMarksTheJobRunning(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.deliver(jobEvent{action: "queued", id: 7001, runID: 71, labels: poolLabels(71)})
	f.deliver(jobEvent{action: "queued", id: 7002, runID: 72, labels: poolLabels(72)})
	f.step()
	f.instance("i-assigned", domain.StateClaimed, 7001)
	f.setJob(7001, func(j *domain.Job) { j.Status, j.InstanceID = domain.JobAssigned, "i-assigned" })

	f.deliver(jobEvent{action: "in_progress", id: 7001, runID: 71, labels: poolLabels(71), runnerName: "bullpen-i-assigned"})
	f.deliver(jobEvent{action: "in_progress", id: 7002, runID: 72, labels: poolLabels(72), runnerName: "elsewhere"})
	f.deliver(jobEvent{action: "in_progress", id: 7003, runID: 73, labels: poolLabels(73)}) // never seen queued
	f.step()

	started := startedAt
	for id, runner := range map[int64]string{7001: "bullpen-i-assigned", 7002: "elsewhere"} {
		if j := f.Job(id); j.Status != domain.JobRunning || j.RunnerName != runner || !j.StartedAt.Equal(started) {
			t.Errorf("job %d: %s runner %q started %v; want running on %q at %v", id, j.Status, j.RunnerName, j.StartedAt, runner, started)
		}
	}
	if in := f.Instance("i-assigned"); !in.JobStarted || in.State != domain.StateClaimed {
		t.Errorf("instance %s job-started %v, want its job marked started", in.State, in.JobStarted)
	}
	// Never seen queued: recorded as it is, so that its late queued
	// delivery does not send it to be served.
	if j := f.Job(7003); j.Status != domain.JobRunning || !j.StartedAt.Equal(started) {
		t.Errorf("job 7003: %s started %v; want running since %v", j.Status, j.StartedAt, started)
	}
	f.wantEvents("in_progress", "recorded", 3)
	f.inboxEmpty()
}

// An in_progress delivery leaves alone an instance done with its job:
// GitHub may deliver in_progress after completed, while the instance is
// being released; and the instance can be gone (terminated, still naming
// its last job). The job's start is recorded when it still waits for one,
// and the delivery done, not retried against a row that must not change.
func TestInProgressLeavesAnInstanceDoneWithItsJobAlone(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		instance domain.State
		job      func(*domain.Job) // what became of the job meanwhile
		want     domain.JobStatus
	}{
		{"late, after completed", domain.StateRunning,
			func(j *domain.Job) { j.Status, j.Conclusion = domain.JobCompleted, "success" }, domain.JobCompleted},
		{"instance terminated", domain.StateTerminated,
			func(j *domain.Job) { j.Status = domain.JobAssigned }, domain.JobRunning},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.deliver(jobEvent{action: "queued", id: 7101, runID: 711, labels: poolLabels(711)})
			f.step()
			f.instance("i-1", c.instance, 7101)
			f.setJob(7101, func(j *domain.Job) { c.job(j); j.InstanceID = "i-1" })

			f.deliver(jobEvent{action: "in_progress", id: 7101, runID: 711, labels: poolLabels(711)})
			f.step()
			if j := f.Job(7101); j.Status != c.want {
				t.Fatalf("job %s, want %s", j.Status, c.want)
			}
			if in := f.Instance("i-1"); in.JobStarted || in.Version != 1 {
				t.Errorf("instance changed (job-started %v, version %d)", in.JobStarted, in.Version)
			}
			f.inboxEmpty()
		})
	}
}

func TestCompletedCallsTheFinisher(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.deliver(jobEvent{action: "completed", id: 8001, runID: 81, labels: poolLabels(81), conclusion: "failure"})
	f.deliver(jobEvent{action: "completed", id: 8002, runID: 82, labels: poolLabels(82), conclusion: "cancelled"})
	f.step()
	want := []finishCall{{8001, "failure"}, {8002, "cancelled"}}
	if got := f.fin.recorded(); !slices.Equal(got, want) {
		t.Fatalf("Finish calls %v, want %v", got, want)
	}
	f.wantEvents("completed", "recorded", 2)
	f.inboxEmpty()
}

// A matrix with a mistyped pool is rejected whole, in one batch, and no
// run is cancelled on arrival: a reload may yet serve its jobs, and the
// reaper cancels the runs of those it does not once a grace is over.
func TestRejectedJobsOfOneRunAreNotCancelledOnArrival(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	for i := range int64(4) {
		f.deliver(jobEvent{action: "queued", id: 3101 + i, runID: 33, labels: []string{"runs-on=33/pool=typo"}})
	}
	f.deliver(jobEvent{action: "queued", id: 3201, runID: 34, labels: []string{"runs-on=34/pool=typo"}})
	f.deliver(jobEvent{action: "queued", id: 3202, runID: 34, labels: []string{"runs-on=34/pool=typo"}})
	f.step()
	for _, id := range []int64{3101, 3102, 3103, 3104, 3201, 3202} {
		if j := f.Job(id); j.Status != domain.JobRejected {
			t.Fatalf("job %d %s, want rejected", id, j.Status)
		}
	}
	if got := f.gh.cancelled(); len(got) != 0 {
		t.Errorf("CancelRun calls %v, want none", got)
	}
	f.wantEvents("queued", "rejected", 6)
	f.inboxEmpty()
}

// The starts and ends of jobs that are not ours (GitHub-hosted, other
// self-hosted runners) are most of what GitHub sends: they are counted as
// not ours and cost one store read each (is the job recorded here?),
// nothing more.
func TestProgressOfJobsThatAreNotOursReadsOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	for _, labels := range [][]string{nil, {"self-hosted", "linux"}} {
		f.deliver(jobEvent{action: "in_progress", id: 2201, runID: 22, labels: labels, runnerName: "GitHub Actions 5"})
		f.deliver(jobEvent{action: "completed", id: 2201, runID: 22, labels: labels, runnerName: "GitHub Actions 5", conclusion: "success"})
	}
	f.step()
	if n := f.writes.jobReads(); n != 4 {
		t.Errorf("%d job reads, want one per event", n)
	}
	if got := f.fin.recorded(); len(got) != 0 {
		t.Errorf("Finish calls %v, want none", got)
	}
	f.wantEvents("in_progress", "not_ours", 2)
	f.wantEvents("completed", "not_ours", 2)
	f.wantEvents("in_progress", "recorded", 0)
	f.wantEvents("completed", "recorded", 0)
	f.noJob(2201)
	f.inboxEmpty()
}

// A job whose labels are bullpen's but name an environment no pool names
// (a typo, most likely) waits for a runner no stack starts: a warning says
// so, once per environment name every UnknownEnvironmentWarnEvery.
func TestAJobNamingAnUnknownEnvironmentIsWarnedOf(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	warnings := func() int { return len(f.logs.Lines("level=WARN", "environment no pool")) }
	f.deliver(jobEvent{action: "queued", id: 2301, runID: 23, labels: []string{"runs-on=23/pool=small-x64/env=dve"}})
	f.deliver(jobEvent{action: "queued", id: 2302, runID: 23, labels: []string{"runs-on=23/pool=small-x64/env=DVE"}})
	f.deliver(jobEvent{action: "queued", id: 2303, runID: 23, labels: []string{"runs-on=23/pool=small-dev/env=dev"}})
	f.deliver(jobEvent{action: "queued", id: 2304, runID: 23, labels: []string{"ubuntu-latest"}})
	f.step()
	if l := f.logs.Lines("level=WARN", "environment no pool", "env=dve", "job=2301"); len(l) != 1 || warnings() != 1 {
		t.Fatalf("want one WARN naming the job and its environment, got %q", f.logs.Lines("level=WARN"))
	}
	f.noJob(2301)
	f.wantEvents("queued", "not_ours", 4)

	f.Clock.Advance(UnknownEnvironmentWarnEvery - time.Second)
	f.deliver(jobEvent{action: "queued", id: 2305, runID: 24, labels: []string{"runs-on=24/pool=small-x64/env=dve"}})
	f.step()
	if n := warnings(); n != 1 {
		t.Fatalf("%d warnings within %s of the first, want 1", n, UnknownEnvironmentWarnEvery)
	}
	f.deliver(jobEvent{action: "queued", id: 2306, runID: 24, labels: []string{"runs-on=24/pool=small-x64/env=stagin"}})
	f.step()
	if n := warnings(); n != 2 {
		t.Fatalf("%d warnings, want a second for another environment", n)
	}
	f.Clock.Advance(time.Second)
	f.deliver(jobEvent{action: "queued", id: 2307, runID: 25, labels: []string{"runs-on=25/pool=small-x64/env=dve"}})
	f.step()
	if n := warnings(); n != 3 {
		t.Fatalf("%d warnings, want the first environment's again once %s passed", n, UnknownEnvironmentWarnEvery)
	}
	f.inboxEmpty()
}

// A job this stack recorded is its to start and end, whatever the labels
// of a later delivery say (none at all, or labels the configuration in
// force no longer routes here).
func TestProgressOfARecordedJobIsAppliedWhateverItsLabels(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.deliver(jobEvent{action: "queued", id: 2401, runID: 24, labels: poolLabels(24)})
	f.step()
	f.deliver(jobEvent{action: "completed", id: 2401, runID: 24, conclusion: "failure"})
	f.step()
	if got := f.fin.recorded(); !slices.Equal(got, []finishCall{{2401, "failure"}}) {
		t.Fatalf("Finish calls %v, want job 2401's", got)
	}
	f.wantEvents("completed", "recorded", 1)
	f.inboxEmpty()
}
