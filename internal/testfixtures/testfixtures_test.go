package testfixtures

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// GitHub's own signing code and Go's HMAC agree, on GitHub's example
// payloads and on bodies of other shapes.
func TestGoSignMatchesGitHubsSigningCode(t *testing.T) {
	const secret = "It's a Secret to Everybody"
	var bodies [][]byte
	for _, e := range WorkflowJobExamples(t) {
		bodies = append(bodies, e)
	}
	bodies = append(bodies, []byte(`{"action":"queued"}`), []byte(`{}`), []byte("{\"a\":\"<é>\"}\n"))
	for i, sig := range SignAll(t, secret, bodies) {
		if want := GoSign(secret, bodies[i]); sig != want {
			t.Errorf("body %d: @octokit/webhooks-methods signs %s, Go computes %s", i, sig, want)
		}
	}
}

func TestWorkflowJobExamples(t *testing.T) {
	if n := len(WorkflowJobExamples(t)); n < 4 {
		t.Fatalf("only %d workflow_job examples", n)
	}
}

// A payload built here reads back as the job it describes.
func TestPayloadParses(t *testing.T) {
	started := time.Date(2026, 11, 24, 9, 1, 0, 0, time.UTC)
	ev, err := webhook.ParseWorkflowJob(Payload(Job{Action: "in_progress", ID: 7, RunID: 8, Labels: []string{"a", "b"},
		RunnerName: "bp-1-7", RunnerID: 3, Started: started}))
	if err != nil {
		t.Fatal(err)
	}
	j := ev.Job
	if ev.Action != "in_progress" || j.ID != 7 || j.RunID != 8 || j.RunAttempt != 1 || len(j.Labels) != 2 ||
		j.RunnerName != "bp-1-7" || !j.StartedAt.Equal(started) || ev.Repo != "acme/widgets" {
		t.Fatalf("parsed %+v", ev)
	}
}

// A payload's status is its action's unless it says otherwise, as for a job
// held for an approval, which comes queued with status waiting.
func TestPayloadStatus(t *testing.T) {
	for _, c := range []struct{ action, status, want string }{
		{"queued", "", "queued"},
		{"completed", "", "completed"},
		{"queued", "waiting", "waiting"},
		{"waiting", "waiting", "waiting"},
	} {
		ev, err := webhook.ParseWorkflowJob(Payload(Job{Action: c.action, Status: c.status, ID: 7, RunID: 8}))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Action != c.action || ev.Job.Status != c.want {
			t.Errorf("%s with status %q: parsed %s with status %q, want %q", c.action, c.status, ev.Action, ev.Job.Status, c.want)
		}
	}
}

// GitHub's own examples hold a job waiting for an approval under both
// actions, queued and waiting, each with status waiting: the sequence
// Payload's Status lets tests send.
func TestExamplesSendAHeldJobQueuedWithStatusWaiting(t *testing.T) {
	held := map[string]bool{}
	for _, raw := range WorkflowJobExamples(t) {
		ev, err := webhook.ParseWorkflowJob(raw)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Job.Status == "waiting" {
			held[ev.Action] = true
		}
	}
	if !held["queued"] || !held["waiting"] {
		t.Fatalf("examples with status waiting come as %v, want queued and waiting", held)
	}
}
