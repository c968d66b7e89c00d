package webhook

import (
	"bytes"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

func addSeeds(f *testing.F, add func(body []byte)) {
	for _, e := range examples(f) {
		add(e)
	}
	for _, s := range []string{``, `null`, `{}`, `[]`, `{"action":null}`, `{"action":"queued","workflow_job":null}`,
		`{"action":"queued","workflow_job":{"id":1,"run_id":1,"labels":[null]},"repository":{"full_name":"a/b"}}`,
		`{"action":"queued","workflow_job":{"id":-1,"run_id":1e400,"labels":{}},"repository":[]}`,
		`{"action":"queued","workflow_job":{"id":1,"run_id":1,"labels":[],"created_at":"2021-13-45T99:00:00Z"},"repository":{"full_name":"a/b"}}`} {
		add([]byte(s))
	}
}

// ParseWorkflowJob never panics, and what it accepts is complete.
func FuzzParseWorkflowJob(f *testing.F) {
	addSeeds(f, func(b []byte) { f.Add(b) })
	f.Fuzz(func(t *testing.T, payload []byte) {
		ev, err := ParseWorkflowJob(payload)
		if err != nil {
			if !errors.Is(err, ErrInvalidPayload) && !errors.Is(err, ErrUnhandledAction) {
				t.Fatalf("error of no known kind: %v", err)
			}
			return
		}
		known := []string{ActionQueued, ActionWaiting, ActionInProgress, ActionCompleted}
		if !slices.Contains(known, ev.Action) || ev.Job.ID <= 0 || ev.Job.RunID <= 0 || ev.Job.Labels == nil || ev.Repo == "" {
			t.Fatalf("accepted an incomplete event: %+v", ev)
		}
	})
}

// Whatever a correctly signed request carries, the handler answers with a
// documented status, and what it accepts decodes back to the body it got.
func FuzzHandler(f *testing.F) {
	addSeeds(f, func(b []byte) { f.Add(b, "workflow_job", "d-1") })
	f.Add([]byte(`{}`), "ping", "")
	f.Add([]byte(`{}`), "push", "x")
	r := newRig(f)
	f.Fuzz(func(t *testing.T, body []byte, event, delivery string) {
		r.queue = newFakeQueue()
		r.h.queue = r.queue
		req, err := http.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
		if err != nil {
			t.Skip()
		}
		req.Header = http.Header{HeaderEvent: {event}, HeaderDelivery: {delivery}, HeaderSignature: {testfixtures.GoSign(testSecret, body)}}
		rec := newRecorder()
		r.h.ServeHTTP(rec, req)
		sent := r.queue.sent(domain.QueueInbox)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest:
		case http.StatusAccepted:
			if len(sent) == 1 {
				checkStored(t, sent[0], body, delivery)
			}
		default:
			t.Fatalf("status %d for a signed request: %s", rec.Code, rec.Body)
		}
		if len(sent) > 1 || (len(sent) == 1 && rec.Code != http.StatusAccepted) {
			t.Fatalf("%d messages stored with status %d", len(sent), rec.Code)
		}
	})
}

func checkStored(t *testing.T, m domain.SendRequest, body []byte, delivery string) {
	t.Helper()
	d, err := DecodeDelivery(m.Body)
	if err != nil {
		t.Fatalf("stored envelope: %v", err)
	}
	if d.ID != delivery || m.DedupID != delivery {
		t.Fatalf("stored %+v, want delivery %q", d, delivery)
	}
	checkReadAsSent(t, d.Payload, body)
}
