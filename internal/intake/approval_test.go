package intake

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// heldEvent is a delivery of job 6101 while an environment's reviewers
// hold it: GitHub reports its status waiting under either action.
func heldEvent(action string) jobEvent {
	return jobEvent{action: action, status: "waiting", id: 6101, runID: 611, labels: poolLabels(611)}
}

// A job held for an approval comes waiting, or queued with status waiting
// and waiting, in either order. It is recorded waiting, since the
// payload's created_at, and sent nowhere until GitHub queues it with
// status queued, once approved; a late held delivery does not hold it back
// again.
func TestAJobHeldForApprovalIsSentOnlyOnceApproved(t *testing.T) {
	t.Parallel()
	for _, order := range [][]string{{"waiting"}, {"queued", "waiting"}, {"waiting", "queued"}} {
		t.Run(strings.Join(order, " then "), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			for _, action := range order {
				f.deliver(heldEvent(action))
				f.step()
				if j := f.Job(6101); j.Status != domain.JobQueued || j.Reason != ReasonWaiting || !j.QueuedAt.Equal(createdAt) {
					t.Fatalf("after %s (status waiting): job %s %q queued %v, want queued since %v, waiting for approval", action, j.Status, j.Reason, j.QueuedAt, createdAt)
				}
				if n := f.sends.sent(domain.QueuePool); n != 0 || f.Stats(domain.QueuePool).Visible != 0 {
					t.Fatalf("after %s (status waiting): %d sends to the pool queue, want none", action, n)
				}
			}
			f.wantEvents("waiting", "recorded", 1)

			f.deliver(jobEvent{action: "queued", id: 6101, runID: 611, labels: poolLabels(611)})
			f.step()
			if j := f.Job(6101); j.Status != domain.JobQueued || j.Reason != "" {
				t.Fatalf("approved job %s %q, want queued without a reason", j.Status, j.Reason)
			}
			f.wantQueued(domain.QueuePool, 6101)

			for _, action := range order {
				f.deliver(heldEvent(action))
				f.step()
				if j := f.Job(6101); j.Reason != "" {
					t.Errorf("late held %s delivery set reason %q", action, j.Reason)
				}
			}
			f.inboxEmpty()
		})
	}
}

// GitHub's own payloads of a held job (@octokit/webhooks-examples), with
// bullpen's labels: neither sends it to be served.
func TestGitHubsPayloadsOfAHeldJobSendNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	var ids []int64
	for _, raw := range testfixtures.WorkflowJobExamples(t) {
		var p map[string]any
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		job := p["workflow_job"].(map[string]any)
		if job["status"] != "waiting" {
			continue
		}
		job["labels"] = poolLabels(612)
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		f.deliverPayload(b)
		ids = append(ids, int64(job["id"].(float64)))
	}
	if len(ids) < 2 {
		t.Fatalf("%d examples of a held job, want its queued and its waiting", len(ids))
	}
	for range ids {
		f.step()
	}
	if j := f.Job(ids[0]); j.Reason != ReasonWaiting {
		t.Fatalf("job %s %q, want waiting for approval", j.Status, j.Reason)
	}
	if n := f.sends.sent(domain.QueuePool); n != 0 {
		t.Fatalf("%d sends to the pool queue, want none", n)
	}
	f.inboxEmpty()
}

// A held delivery dead-lettered, waiting or even queued, leaves its job
// waiting, whichever queue it is for: only the approval's queued delivery
// may release it, and sends it.
func TestDeadLetteredHeldDeliveryLeavesItsJobWaiting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, action string
		labels       []string
		queue        string
	}{
		{"waiting, pool job", "waiting", poolLabels(611), domain.QueuePool},
		{"queued, pool job", "queued", poolLabels(611), domain.QueuePool},
		{"waiting, cold-start job", "waiting", launchLabels(611), domain.QueueLaunch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{Visibility: 30 * time.Second, MaxReceives: 2})
			held := func(action string) jobEvent {
				return jobEvent{action: action, status: "waiting", id: 6101, runID: 611, labels: tc.labels}
			}
			f.deliver(held("waiting"))
			f.step()
			f.writes.failCreate = func([]domain.Job) error { return errors.New("disk full") }
			body := f.deliver(held(tc.action))
			f.failingRounds(2)
			f.deadLettered(body)
			if j := f.Job(6101); j.Reason != ReasonWaiting || j.SendPending {
				t.Fatalf("job reason %q, send pending %v; want still waiting, nothing to send", j.Reason, j.SendPending)
			}
			f.writes.failCreate = nil
			f.deliver(jobEvent{action: "queued", id: 6101, runID: 611, labels: tc.labels})
			f.step()
			f.wantQueued(tc.queue, 6101)
		})
	}
}

// The simulated GitHub holds a job for its approval as GitHub does, and
// the intake sends it to be served only once it is approved.
func TestASimulatedJobAwaitingApprovalIsServedOnceApproved(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	gh := sim.New(f.Clock, sim.Options{Deliver: func(_, id string, body []byte) {
		if err := webhook.Enqueue(f.Ctx, f.Queue, f.Clock.Now(), id, body); err != nil {
			t.Error(err)
		}
	}})
	job := gh.QueueJob(sim.JobSpec{Repo: "acme/widgets", Labels: []string{"runs-on=" + sim.RunIDExpr + "/pool=small-x64"},
		AwaitApproval: true})
	for f.Stats(domain.QueueInbox).Visible > 0 {
		f.step()
	}
	if j := f.Job(job.ID); j.Reason != ReasonWaiting {
		t.Fatalf("job %s %q, want waiting for approval", j.Status, j.Reason)
	}
	if n := f.sends.sent(domain.QueuePool); n != 0 {
		t.Fatalf("%d sends to the pool queue before the approval, want none", n)
	}
	if err := gh.Approve(job.ID); err != nil {
		t.Fatal(err)
	}
	f.step()
	f.wantQueued(domain.QueuePool, job.ID)
	f.inboxEmpty()
}
