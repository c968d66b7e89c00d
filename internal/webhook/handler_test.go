package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

type handlerCase struct {
	name     string
	method   string // POST when empty
	event    string
	delivery string
	body     []byte
	// signature: "" signs body with the test secret; "-" sends none.
	signature string
	queueErr  error

	status  int
	outcome string
	// want is a substring of the response body.
	want string
	sent int
}

// handlerCases covers every answer of the handler.
func handlerCases(t *testing.T) []handlerCase {
	return append(routingCases(t), payloadCases(t)...)
}

// routingCases: method, signature, event and delivery headers, the queue.
func routingCases(t *testing.T) []handlerCase {
	valid := encode(t, validJob())
	withAction := func(action string) []byte {
		m := validJob()
		m["action"] = action
		return encode(t, m)
	}
	wrong := testfixtures.GoSign("not the secret", valid)
	return []handlerCase{
		{name: "accepted", event: "workflow_job", delivery: "d-1", body: valid, status: 202, outcome: OutcomeAccepted, want: `{"accepted":"d-1"}`, sent: 1},
		{name: "each action accepted: waiting", event: "workflow_job", delivery: "d-1", body: withAction("waiting"), status: 202, outcome: OutcomeAccepted, sent: 1},
		{name: "each action accepted: in_progress", event: "workflow_job", delivery: "d-1", body: withAction("in_progress"), status: 202, outcome: OutcomeAccepted, sent: 1},
		{name: "each action accepted: completed", event: "workflow_job", delivery: "d-1", body: withAction("completed"), status: 202, outcome: OutcomeAccepted, sent: 1},

		{name: "GET not allowed", method: http.MethodGet, event: "workflow_job", delivery: "d-1", body: valid, status: 405, outcome: OutcomeBadRequest, want: "method not allowed"},
		{name: "missing signature", event: "workflow_job", delivery: "d-1", body: valid, signature: "-", status: 401, outcome: OutcomeUnauthorized, want: "missing X-Hub-Signature-256"},
		{name: "sha1 signature", event: "workflow_job", delivery: "d-1", body: valid, signature: "sha1=" + strings.Repeat("a", 40), status: 401, outcome: OutcomeUnauthorized, want: "malformed X-Hub-Signature-256"},
		{name: "signature not hex", event: "workflow_job", delivery: "d-1", body: valid, signature: "sha256=" + strings.Repeat("z", 64), status: 401, outcome: OutcomeUnauthorized, want: "malformed"},
		{name: "signature too short", event: "workflow_job", delivery: "d-1", body: valid, signature: wrong[:len(wrong)-2], status: 401, outcome: OutcomeUnauthorized, want: "malformed"},
		{name: "signature without prefix", event: "workflow_job", delivery: "d-1", body: valid, signature: strings.TrimPrefix(wrong, "sha256="), status: 401, outcome: OutcomeUnauthorized, want: "malformed"},
		{name: "signature with another secret", event: "workflow_job", delivery: "d-1", body: valid, signature: wrong, status: 401, outcome: OutcomeUnauthorized, want: "signature does not match"},
		{name: "unsigned garbage is unauthorized, not a bad request", event: "workflow_job", body: []byte("{not json"), signature: wrong, status: 401, outcome: OutcomeUnauthorized, want: "signature does not match"},

		{name: "missing event", delivery: "d-1", body: valid, status: 400, outcome: OutcomeBadRequest, want: "missing X-GitHub-Event"},
		{name: "ping", event: "ping", delivery: "d-1", body: []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`), status: 200, outcome: OutcomeIgnored, want: `{"ok":true}`},
		{name: "ping needs a signature", event: "ping", body: []byte(`{}`), signature: "-", status: 401, outcome: OutcomeUnauthorized},
		{name: "other event ignored", event: "push", delivery: "d-1", body: []byte(`{"ref":"refs/heads/main"}`), status: 202, outcome: OutcomeIgnored, want: `{"ignored":"push"}`},
		{name: "other action ignored", event: "workflow_job", delivery: "d-1", body: withAction("requested"), status: 202, outcome: OutcomeIgnored, want: `"action":"requested"`},

		{name: "missing delivery", event: "workflow_job", body: valid, status: 400, outcome: OutcomeBadRequest, want: "missing X-GitHub-Delivery"},
		{name: "overlong delivery", event: "workflow_job", delivery: strings.Repeat("d", 129), body: valid, status: 400, outcome: OutcomeBadRequest, want: "invalid X-GitHub-Delivery"},
		{name: "delivery with a space", event: "workflow_job", delivery: "d 1", body: valid, status: 400, outcome: OutcomeBadRequest, want: "invalid X-GitHub-Delivery"},

		{name: "queue down", event: "workflow_job", delivery: "d-1", body: valid, queueErr: errors.New("database is locked"), status: 503, outcome: OutcomeUnavailable, want: "redeliver later"},
	}
}

// payloadCases: workflow_job payloads at the edge of valid, and each refusal
// naming its field.
func payloadCases(t *testing.T) []handlerCase {
	without := func(path ...string) []byte {
		m := validJob()
		target := m
		for _, p := range path[:len(path)-1] {
			target = target[p].(map[string]any)
		}
		delete(target, path[len(path)-1])
		return encode(t, m)
	}
	with := func(field string, v any) []byte {
		m := validJob()
		jobField(m)[field] = v
		return encode(t, m)
	}
	withTop := func(field string, v any) []byte {
		m := validJob()
		m[field] = v
		return encode(t, m)
	}
	return []handlerCase{
		{name: "empty labels accepted", event: "workflow_job", delivery: "d-1", body: with("labels", []any{}), status: 202, outcome: OutcomeAccepted, sent: 1},
		{name: "malformed JSON", event: "workflow_job", delivery: "d-1", body: []byte(`{"action":`), status: 400, outcome: OutcomeBadRequest, want: "malformed JSON at byte"},
		{name: "empty body", event: "workflow_job", delivery: "d-1", body: nil, status: 400, outcome: OutcomeBadRequest, want: "malformed JSON"},
		{name: "not an object", event: "workflow_job", delivery: "d-1", body: []byte(`[1,2]`), status: 400, outcome: OutcomeBadRequest, want: "must be a JSON object"},
		{name: "missing action", event: "workflow_job", delivery: "d-1", body: without("action"), status: 400, outcome: OutcomeBadRequest, want: "action is missing"},
		{name: "missing workflow_job", event: "workflow_job", delivery: "d-1", body: without("workflow_job"), status: 400, outcome: OutcomeBadRequest, want: "workflow_job is missing"},
		{name: "missing id", event: "workflow_job", delivery: "d-1", body: without("workflow_job", "id"), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.id is missing"},
		{name: "missing run_id", event: "workflow_job", delivery: "d-1", body: without("workflow_job", "run_id"), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.run_id is missing"},
		{name: "missing labels", event: "workflow_job", delivery: "d-1", body: without("workflow_job", "labels"), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.labels is missing"},
		{name: "missing repository", event: "workflow_job", delivery: "d-1", body: without("repository"), status: 400, outcome: OutcomeBadRequest, want: "repository is missing"},
		{name: "missing full_name", event: "workflow_job", delivery: "d-1", body: without("repository", "full_name"), status: 400, outcome: OutcomeBadRequest, want: "repository.full_name is missing"},
		{name: "id not a number", event: "workflow_job", delivery: "d-1", body: with("id", "42"), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.id must be an integer"},
		{name: "id zero", event: "workflow_job", delivery: "d-1", body: with("id", 0), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.id must be a positive integer"},
		{name: "labels not an array", event: "workflow_job", delivery: "d-1", body: with("labels", "self-hosted"), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.labels must be an array of strings"},
		{name: "label not a string", event: "workflow_job", delivery: "d-1", body: with("labels", []any{1}), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.labels must be an array of strings"},
		{name: "label null", event: "workflow_job", delivery: "d-1", body: with("labels", []any{"a", nil}), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.labels[1] must be a string"},
		{name: "bad time", event: "workflow_job", delivery: "d-1", body: with("created_at", "yesterday"), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.created_at must be an RFC 3339 time"},
		// RFC 3339 times the store refuses: year 0, and year 1 before its
		// first hour in UTC.
		{name: "year 0", event: "workflow_job", delivery: "d-1", body: with("created_at", "0000-06-01T00:00:00Z"), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.created_at must be in years 1 to 9999 (UTC)"},
		{name: "year 0 in UTC", event: "workflow_job", delivery: "d-1", body: with("started_at", "0001-01-01T00:00:00+01:00"), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.started_at must be in years 1 to 9999 (UTC)"},
		{name: "year 10000 in UTC", event: "workflow_job", delivery: "d-1", body: with("completed_at", "9999-12-31T23:30:00-01:00"), status: 400, outcome: OutcomeBadRequest, want: "workflow_job.completed_at must be in years 1 to 9999 (UTC)"},
		{name: "last second of year 9999", event: "workflow_job", delivery: "d-1", body: with("completed_at", "9999-12-31T23:59:59Z"), status: 202, outcome: OutcomeAccepted, sent: 1},
		{name: "bad full_name", event: "workflow_job", delivery: "d-1", body: withTop("repository", map[string]any{"full_name": "app"}), status: 400, outcome: OutcomeBadRequest, want: "repository.full_name must be owner/name"},
	}
}

func TestHandlerStatusCodes(t *testing.T) {
	for _, tc := range handlerCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.queue.fail = tc.queueErr
			sig := tc.signature
			switch sig {
			case "":
				sig = testfixtures.GoSign(testSecret, tc.body)
			case "-":
				sig = ""
			}
			req := httptest.NewRequest(cmp(tc.method, http.MethodPost), "/webhook", bytes.NewReader(tc.body))
			req.Header = headers(tc.event, tc.delivery, sig)
			rec := httptest.NewRecorder()
			r.h.ServeHTTP(rec, req)

			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tc.status, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tc.want) {
				t.Errorf("body %s, want it to contain %q", rec.Body, tc.want)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if !json.Valid(rec.Body.Bytes()) {
				t.Errorf("body is not JSON: %s", rec.Body)
			}
			if got := len(r.queue.sent(domain.QueueInbox)); got != tc.sent {
				t.Errorf("%d messages in the inbox, want %d", got, tc.sent)
			}
			checkHeaders(t, tc, rec)
			if got := testutil.ToFloat64(r.h.metrics.deliveries.WithLabelValues(eventLabel(tc.event), tc.outcome)); got != 1 {
				t.Errorf("deliveries{event=%q,outcome=%q} = %v, want 1", eventLabel(tc.event), tc.outcome, got)
			}
			checkNoSecrets(t, tc.body, rec.Body.String(), r.logs.String())
			checkLogLevel(t, tc.outcome, r.logs.String())
		})
	}
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func checkHeaders(t *testing.T, tc handlerCase, rec *httptest.ResponseRecorder) {
	t.Helper()
	if tc.status == 405 && rec.Header().Get("Allow") != http.MethodPost {
		t.Errorf("Allow %q, want POST", rec.Header().Get("Allow"))
	}
	if tc.status == 503 && rec.Header().Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
}

// checkNoSecrets: neither the secret nor the signature the handler expects
// may appear in an answer or a log line.
func checkNoSecrets(t *testing.T, body []byte, out ...string) {
	t.Helper()
	expected := strings.TrimPrefix(testfixtures.GoSign(testSecret, body), "sha256=")
	for _, s := range out {
		if strings.Contains(s, testSecret) || strings.Contains(s, expected) {
			t.Errorf("secret or expected signature leaked: %s", s)
		}
	}
}

func checkLogLevel(t *testing.T, outcome, logs string) {
	t.Helper()
	want := `"level":"WARN"`
	if outcome == OutcomeAccepted || outcome == OutcomeIgnored {
		want = `"level":"DEBUG"`
	}
	if !strings.Contains(logs, want) {
		t.Errorf("log %s, want a line at %s", logs, want)
	}
}

func TestQueueFailureIsLoggedWithTheDelivery(t *testing.T) {
	r := newRig(t)
	r.queue.fail = errors.New("database is locked")
	body := encode(t, validJob())
	rec := r.post(headers("workflow_job", "d-503", testfixtures.GoSign(testSecret, body)), bytes.NewReader(body))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != retryAfter {
		t.Fatalf("status %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	if strings.Contains(rec.Body.String(), "locked") {
		t.Errorf("the queue's error reached the sender: %s", rec.Body)
	}
	logs := r.logs.String()
	for _, want := range []string{`"level":"WARN"`, `"delivery":"d-503"`, "database is locked"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log %s lacks %s", logs, want)
		}
	}
}

func TestAcceptedLogNamesIDsNotContents(t *testing.T) {
	r := newRig(t)
	m := validJob()
	jobField(m)["name"] = "secret-step-name"
	body := encode(t, m)
	rec := r.post(headers("workflow_job", "d-log", testfixtures.GoSign(testSecret, body)), bytes.NewReader(body))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	logs := r.logs.String()
	for _, want := range []string{`"delivery":"d-log"`, `"job_id":42`, `"run_id":7`, `"level":"DEBUG"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log %s lacks %s", logs, want)
		}
	}
	if strings.Contains(logs, "secret-step-name") || strings.Contains(logs, "runs-on=") {
		t.Errorf("payload contents logged: %s", logs)
	}
}

func TestNewRefusesAnEmptySecret(t *testing.T) {
	if _, err := New("", newFakeQueue(), newRig(t).clock, nil, nil, Options{}); err == nil {
		t.Fatal("no error for an empty secret")
	}
}

func TestEventLabelIsBounded(t *testing.T) {
	for event, want := range map[string]string{"ping": "ping", "workflow_job": "workflow_job", "": "none", "push": "push", "issues": "other", strings.Repeat("x", 1000): "other"} {
		if got := eventLabel(event); got != want {
			t.Errorf("eventLabel(%q) = %q, want %q", event, got, want)
		}
	}
}

// A webhook set to send forms fails at its ping already, naming the
// setting to change, instead of a green ping and every job refused as
// malformed JSON.
func TestAFormEncodedWebhookIsToldToSendJSON(t *testing.T) {
	r := newRig(t)
	form := []byte("payload=" + url.QueryEscape(string(encode(t, validJob()))))
	for _, event := range []string{EventPing, EventWorkflowJob} {
		h := headers(event, "d-form-"+event, testfixtures.GoSign(testSecret, form))
		h.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := r.post(h, bytes.NewReader(form))
		if rec.Code != http.StatusUnsupportedMediaType || !strings.Contains(rec.Body.String(), "set its content type to application/json") {
			t.Fatalf("%s as a form: %d %s", event, rec.Code, rec.Body)
		}
	}
	if sent := r.queue.sent(domain.QueueInbox); len(sent) != 0 {
		t.Fatalf("a form was queued: %d messages", len(sent))
	}
	body := encode(t, validJob())
	h := headers(EventWorkflowJob, "d-json", testfixtures.GoSign(testSecret, body))
	h.Set("Content-Type", "application/json; charset=utf-8")
	if rec := r.post(h, bytes.NewReader(body)); rec.Code != http.StatusAccepted {
		t.Fatalf("JSON with a charset: %d %s", rec.Code, rec.Body)
	}
}
