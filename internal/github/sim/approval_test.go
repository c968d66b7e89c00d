package sim_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/sim"
)

// A job whose environment needs an approval is announced as GitHub does,
// queued and waiting with status waiting; no runner takes it, nor is it
// listed queued, until it is approved: then it comes queued with status
// queued, and a waiting runner takes it.
func TestAJobAwaitingApprovalWaitsForIt(t *testing.T) {
	e := newEnv(t, sim.Options{})
	job := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}, Duration: time.Minute, AwaitApproval: true})
	if job.Status != sim.StatusWaiting {
		t.Fatalf("job queued %s, want waiting", job.Status)
	}
	log, _ := e.run(e.register("r1", "linux"))
	if started, _ := log.snapshot(); len(started) != 0 {
		t.Fatalf("runner took %v before the approval", started)
	}
	if queued, err := e.gh.QueuedJobs(t.Context(), org); err != nil || len(queued) != 0 {
		t.Fatalf("queued jobs %v, %v; want none before the approval", queued, err)
	}

	if err := e.gh.Approve(job.ID); err != nil {
		t.Fatal(err)
	}
	if started, _ := log.snapshot(); len(started) != 1 || started[0] != job.ID {
		t.Fatalf("runner took %v once approved, want job %d", started, job.ID)
	}
	e.advance(time.Minute)
	var got []string
	for _, d := range e.rec.all() {
		got = append(got, d.action+"/"+d.status)
	}
	want := []string{"queued/waiting", "waiting/waiting", "queued/queued", "in_progress/in_progress", "completed/completed"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("webhooks (action/status) %v, want %v", got, want)
	}
	if err := e.gh.Approve(job.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("approving a job no longer waiting: %v, want not found", err)
	}
}

// A cancelled run ends its jobs still waiting for an approval.
func TestCancelRunEndsAJobAwaitingApproval(t *testing.T) {
	e := newEnv(t, sim.Options{})
	job := e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}, AwaitApproval: true})
	if err := e.gh.CancelRun(t.Context(), "acme/app", job.RunID); err != nil {
		t.Fatal(err)
	}
	if j := e.job(job.ID); j.Status != sim.StatusCompleted || j.Conclusion != sim.ConclusionCancelled {
		t.Fatalf("job %s %q, want completed, cancelled", j.Status, j.Conclusion)
	}
	if got := e.rec.actions(job.ID); fmt.Sprint(got) != "[queued waiting completed]" {
		t.Fatalf("webhooks %v", got)
	}
}

// The webhooks of a job awaiting its approval have the shape of GitHub's.
func TestPayloadsOfAJobAwaitingApprovalHaveGitHubsShape(t *testing.T) {
	ref := unionOfExamples(t)
	e := newEnv(t, sim.Options{})
	e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: []string{"linux"}, AwaitApproval: true})
	for _, d := range e.rec.all() {
		sameShape(t, d.action, "", ref, decode(t, d.body))
	}
}
