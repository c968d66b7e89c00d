package intake

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// GitHub does not order deliveries, and a failed queued delivery is retried
// after later ones: a start or end can come first. The job must be recorded
// then, so that its queued delivery does not send a dead job to be served.
func TestProgressBeforeQueuedRecordsTheJob(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		action     string
		labels     []string
		runnerName string
		conclusion string
		want       domain.JobStatus
		queue      string
	}{
		{"in_progress, pool job", "in_progress", poolLabels(91), "elsewhere", "", domain.JobRunning, domain.QueuePool},
		{"in_progress, cold-start job", "in_progress", launchLabels(91), "elsewhere", "", domain.JobRunning, domain.QueueLaunch},
		{"completed, pool job", "completed", poolLabels(91), "elsewhere", "cancelled", domain.JobCompleted, domain.QueuePool},
		{"completed, cold-start job", "completed", launchLabels(91), "", "failure", domain.JobCompleted, domain.QueueLaunch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.deliver(jobEvent{action: c.action, id: 9001, runID: 91, labels: c.labels, runnerName: c.runnerName, conclusion: c.conclusion})
			f.step()
			j := f.Job(9001)
			if j.Status != c.want || j.RunID != 91 || j.Route == "" || j.Runner == "" {
				t.Fatalf("job %s route %q runner %q run %d; want %s and routed", j.Status, j.Route, j.Runner, j.RunID, c.want)
			}
			switch c.want {
			case domain.JobRunning:
				if j.StartedAt.IsZero() || j.RunnerName != c.runnerName {
					t.Errorf("running job started %v on %q, want the payload's start on %q", j.StartedAt, j.RunnerName, c.runnerName)
				}
			case domain.JobCompleted:
				if j.CompletedAt.IsZero() || j.Conclusion != c.conclusion {
					t.Errorf("completed job at %v %q, want the payload's end and %q", j.CompletedAt, j.Conclusion, c.conclusion)
				}
			}
			f.inboxEmpty()

			f.deliver(jobEvent{action: "queued", id: 9001, runID: 91, labels: c.labels})
			f.step()
			if again := f.Job(9001); again.Status != c.want || again.Version != j.Version {
				t.Fatalf("late queued delivery left the job %s v%d, want %s v%d", again.Status, again.Version, c.want, j.Version)
			}
			if n := f.sends.sent(c.queue); n != 0 || f.Stats(c.queue) != (domain.QueueStats{}) {
				t.Errorf("%d sends to the %s queue, want none", n, c.queue)
			}
			f.wantEvents("queued", "duplicate", 1)
			f.inboxEmpty()
		})
	}
}

// Only bullpen's jobs are recorded: a start or end of a job that is not
// ours, or that bullpen would reject, leaves the store alone, and its late
// queued delivery is handled as if it came first.
func TestProgressBeforeQueuedOfJobsThatAreNotOurs(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		"GitHub-hosted (the example's own labels)": nil,
		"another environment's pool":               {"runs-on=5/pool=small-x64/env=prod"},
		"unknown pool (rejected)":                  {"runs-on=5/pool=large-arm"},
	}
	for name, labels := range cases {
		for _, action := range []string{"in_progress", "completed"} {
			t.Run(name+"/"+action, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, Options{})
				f.deliver(jobEvent{action: action, id: 9101, runID: 5, labels: labels})
				f.step()
				f.noJob(9101)
				if n := f.writes.createCall; len(n) != 0 {
					t.Errorf("CreateJobs called %v, want never", n)
				}
				f.inboxEmpty()
			})
		}
	}
}

// An early start on one of bullpen's runners binds the runner's instance
// to the job, as a start after the queued delivery would.
func TestEarlyStartOnOurRunnerBindsItsInstance(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.instance("bp-early", domain.StateClaimed, 9299) // assigned another job
	f.deliver(jobEvent{action: "in_progress", id: 9201, runID: 92, labels: poolLabels(92), runnerName: "bp-early-9299"})
	f.step()
	if j := f.Job(9201); j.Status != domain.JobRunning || j.InstanceID != "bp-early" {
		t.Fatalf("job %s on %q, want running on bp-early", j.Status, j.InstanceID)
	}
	if in := f.Instance("bp-early"); in.Job != "9201" || !in.JobStarted {
		t.Errorf("instance bound to %q, job-started %v; want 9201, started", in.Job, in.JobStarted)
	}
	f.deliver(jobEvent{action: "queued", id: 9201, runID: 92, labels: poolLabels(92)})
	f.step()
	if n := f.sends.sent(domain.QueuePool); n != 0 {
		t.Errorf("%d sends to the pool queue, want none", n)
	}
	f.inboxEmpty()
}

// Two jobs of one run share their labels. Job 9301 is assigned to bp-swap,
// whose runner took job 9302 instead; 9302's queued and in_progress
// deliveries were lost, and its completed is the first word of it. The
// runner will never run job 9301, which goes back to its queue, and bp-swap
// no longer holds it: else its agent's reports would complete a job that
// never ran.
func TestCompletedFirstOnASwappedRunnerRequeuesTheRunnersJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.deliver(jobEvent{action: "queued", id: 9301, runID: 93, labels: poolLabels(93)})
	f.step()
	f.instance("bp-swap", domain.StateRunning, 9301)
	f.setJob(9301, func(j *domain.Job) { j.Status, j.InstanceID = domain.JobAssigned, "bp-swap" })
	f.deliver(jobEvent{action: "completed", id: 9302, runID: 93, labels: poolLabels(93), conclusion: "success",
		runnerName: domain.RunnerName("bp-swap", 9301)})
	f.step()
	if j := f.Job(9302); j.Status != domain.JobCompleted || j.Conclusion != "success" {
		t.Fatalf("job 9302 %s %q, want completed, success", j.Status, j.Conclusion)
	}
	if j := f.Job(9301); j.Status != domain.JobQueued || j.InstanceID != "" || j.SendPending {
		t.Fatalf("job 9301 %s on %q (send pending %v), want queued again, its message sent", j.Status, j.InstanceID, j.SendPending)
	}
	if n := f.sends.sent(domain.QueuePool); n != 2 {
		t.Errorf("%d sends to the pool queue, want 2: its arrival and its requeue", n)
	}
	if in := f.Instance("bp-swap"); in.Job != "" {
		t.Errorf("bp-swap bound to %q, want unbound", in.Job)
	}
	f.inboxEmpty()
}

// Two stacks read one file, and pool shared serves both. The dev job 9401
// carries env=dev as a label of its own, so its runner's labels cover the
// production job 9402's, and GitHub gives 9402 to it. The dev stack follows
// its runner though the job is not its own: 9401 goes back to its queue,
// and a warning says what let it happen.
func TestOurRunnerTakingAnotherStacksJobRequeuesItsOwn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.in.Routing = func() Routing {
		r := fixtureRouting()
		r.Environment = "dev"
		r.Pools["shared"] = domain.Pool{Name: "shared", Runner: "small-x64"}
		return r
	}
	dev, prod := []string{"runs-on/pool=shared", "env=dev"}, []string{"runs-on/pool=shared"}
	f.deliver(jobEvent{action: "queued", id: 9401, runID: 94, labels: dev})
	f.deliver(jobEvent{action: "queued", id: 9402, runID: 95, labels: prod})
	f.step()
	f.noJob(9402)
	runner := domain.RunnerName("bp-dev", 9401)
	if err := f.Store.CreateInstances(f.Ctx, []domain.Instance{{ID: "bp-dev", CloudID: "cloud-bp-dev", Pool: "shared", Runner: "small-x64",
		State: domain.StateRunning, Job: domain.JobKey(9401), RunnerName: runner}}); err != nil {
		t.Fatal(err)
	}
	f.setJob(9401, func(j *domain.Job) { j.Status, j.InstanceID = domain.JobAssigned, "bp-dev" })
	f.deliver(jobEvent{action: "in_progress", id: 9402, runID: 95, labels: prod, runnerName: runner})
	f.step()
	f.noJob(9402)
	if j := f.Job(9401); j.Status != domain.JobQueued || j.InstanceID != "" {
		t.Fatalf("job 9401 %s on %q, want queued again", j.Status, j.InstanceID)
	}
	if in := f.Instance("bp-dev"); in.Job != "" {
		t.Errorf("bp-dev bound to %q, want unbound", in.Job)
	}
	if l := f.logs.Lines("level=WARN", "not this stack's", "runner="+runner, "job=9402"); len(l) != 1 {
		t.Errorf("want one WARN naming the runner and the job, got %q", l)
	}
	f.wantEvents("in_progress", "not_ours", 1)

	// Its completed retires bp-dev, whose runner is spent, and warns no
	// more.
	f.deliver(jobEvent{action: "completed", id: 9402, runID: 95, labels: prod, runnerName: runner, conclusion: "success"})
	f.step()
	if l := f.logs.Lines("level=WARN"); len(l) != 1 {
		t.Errorf("warnings %q, want the first alone", l)
	}
	if in := f.Instance("bp-dev"); in.State != domain.StateTerminating {
		t.Errorf("bp-dev %s after the foreign job's end, want terminating", in.State)
	}
	if got := f.fin.recorded(); len(got) != 0 {
		t.Errorf("Finish calls %v, want none: the job is not ours", got)
	}
	f.inboxEmpty()
}
