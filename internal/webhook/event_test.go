package webhook

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestParseWorkflowJobCarriesEveryField(t *testing.T) {
	// The second real example: a completed job with every optional field set.
	ev, err := ParseWorkflowJob(examples(t)[1])
	if err != nil {
		t.Fatal(err)
	}
	want := WorkflowJobEvent{
		Action: ActionCompleted,
		Repo:   "Codertocat/Hello-World",
		Job: WorkflowJob{
			ID: 289782451, RunID: 2202229078, RunAttempt: 1, Name: "linters", WorkflowName: "CodeQL",
			Status: "completed", Conclusion: "failure", Labels: []string{"ubuntu-latest"},
			RunnerID: 5, RunnerName: "GitHub Actions 5", HeadBranch: "main",
			HTMLURL:     "https://github.com/octo-org/octo-repo/runs/1291536064",
			CreatedAt:   time.Date(2021, 8, 5, 10, 33, 58, 0, time.UTC),
			StartedAt:   time.Date(2021, 8, 5, 10, 34, 58, 0, time.UTC),
			CompletedAt: time.Date(2021, 8, 5, 10, 38, 16, 0, time.UTC),
		},
	}
	if !reflect.DeepEqual(ev, want) {
		t.Fatalf("got  %+v\nwant %+v", ev, want)
	}
	gj := ev.GitHubJob()
	if gj.ID != want.Job.ID || gj.Repo != want.Repo || gj.Workflow != "CodeQL" || !gj.CreatedAt.Equal(want.Job.CreatedAt) {
		t.Errorf("GitHubJob() = %+v", gj)
	}
}

func TestParseWorkflowJobNullsAreZero(t *testing.T) {
	body := []byte(`{"action":"queued","workflow_job":{"id":1,"run_id":2,"labels":[],"conclusion":null,
		"runner_id":null,"runner_name":null,"started_at":null,"completed_at":null,"head_branch":null},
		"repository":{"full_name":"o/r"}}`)
	ev, err := ParseWorkflowJob(body)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Job.Labels == nil || len(ev.Job.Labels) != 0 {
		t.Errorf("labels %#v, want empty and not nil", ev.Job.Labels)
	}
	if ev.Job.Conclusion != "" || ev.Job.RunnerID != 0 || !ev.Job.StartedAt.IsZero() {
		t.Errorf("nulls not zero: %+v", ev.Job)
	}
}

func TestParseWorkflowJobErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		body string
		kind error
		msg  string
	}{
		{`{"action":"queued","workflow_job":{"run_id":2,"labels":[]},"repository":{"full_name":"o/r"}}`, ErrInvalidPayload, "workflow_job.id is missing"},
		{`{"action":"created"}`, ErrUnhandledAction, `unhandled workflow_job action "created"`},
		{`{"action":"queued",`, ErrInvalidPayload, "invalid workflow_job payload: malformed JSON at byte 19"},
		{`{"action":"queued"} {}`, ErrInvalidPayload, "invalid workflow_job payload: malformed JSON at byte 21"},
		{`"queued"`, ErrInvalidPayload, "invalid workflow_job payload: the payload must be a JSON object"},
		{`{"action":"queued","workflow_job":[],"repository":{"full_name":"o/r"}}`, ErrInvalidPayload, "workflow_job must be an object"},
		{`{"action":"queued","workflow_job":{"id":1,"run_id":2,"labels":[],"run_attempt":"1"},"repository":{"full_name":"o/r"}}`, ErrInvalidPayload, "workflow_job.run_attempt must be an integer"},
		{`{"action":"queued","workflow_job":{"id":1,"run_id":2,"labels":[],"name":5},"repository":{"full_name":"o/r"}}`, ErrInvalidPayload, "workflow_job.name must be a string"},
		{`{"action":"queued","workflow_job":{"id":1,"run_id":2,"labels":[]},"repository":{"full_name":"a/b/c"}}`, ErrInvalidPayload, "repository.full_name must be owner/name"},
	} {
		_, err := ParseWorkflowJob([]byte(tc.body))
		if !errors.Is(err, tc.kind) || err.Error() != tc.msg {
			t.Errorf("%s: got %v, want %q (%v)", tc.body, err, tc.msg, tc.kind)
		}
	}
	var fe *FieldError
	if _, err := ParseWorkflowJob([]byte(`{"action":"queued"}`)); !errors.As(err, &fe) || fe.Field != "repository" {
		t.Errorf("got %v, want a FieldError for repository", err)
	}
}

func TestDeliveryRoundTripKeepsPayloadBytes(t *testing.T) {
	payload := []byte("{\"a\" : \"<b>&\\u00e9é\",\n  \"n\": 1.50}")
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	for _, p := range [][]byte{payload, append(append([]byte(" \n"), payload...), "\r\n"...)} {
		d, err := DecodeDelivery(encodeDelivery(Delivery{ID: "d\"1", Event: "workflow_job", ReceivedAt: at, Payload: p}))
		if err != nil {
			t.Fatal(err)
		}
		if d.ID != "d\"1" || d.Event != "workflow_job" || !d.ReceivedAt.Equal(at) || !bytes.Equal(d.Payload, payload) {
			t.Errorf("round trip: %+v (payload %q)", d, d.Payload)
		}
	}
}

func TestDeliveryErrors(t *testing.T) {
	for _, body := range []string{``, `[]`, `{"event":"e","payload":{}}`, `{"id":"1","payload":{}}`, `{"id":"1","event":"e"}`, `{"id":"1","event":"e","payload":null}`} {
		if _, err := DecodeDelivery([]byte(body)); !errors.Is(err, ErrInvalidDelivery) {
			t.Errorf("DecodeDelivery(%s) = %v, want ErrInvalidDelivery", body, err)
		}
	}
}
