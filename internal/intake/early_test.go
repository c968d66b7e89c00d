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
