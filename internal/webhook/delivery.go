package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Delivery is the envelope the handler puts in the inbox queue for each
// accepted delivery: GitHub's delivery id and event name, when bullpen
// received it, and the payload. The handler stores the payload compacted
// (compactPayload): only the fields ParseWorkflowJob reads, so that its size
// does not grow with the job's steps. Envelopes written before hold
// GitHub's payload whole; ParseWorkflowJob reads both alike.
type Delivery struct {
	ID         string          `json:"id"`    // X-GitHub-Delivery
	Event      string          `json:"event"` // X-GitHub-Event
	ReceivedAt time.Time       `json:"received_at"`
	Payload    json.RawMessage `json:"payload"`
}

// ErrInvalidDelivery: an inbox message is not a Delivery envelope.
var ErrInvalidDelivery = errors.New("invalid delivery envelope")

// MaxEnvelope is the largest inbox message written: the queue port's limit
// on a message (SQS's). A compacted envelope is a few hundred bytes; only
// labels or names of hundreds of kilobytes reach this.
const MaxEnvelope = domain.MaxMessageBody

// errEnvelopeTooLarge: even compacted, a delivery is over MaxEnvelope. The
// queue would refuse it every time, so it is refused as too large.
var errEnvelopeTooLarge = fmt.Errorf("the %s fields bullpen keeps (its labels and names) exceed %d bytes",
	EventWorkflowJob, MaxEnvelope)

// inboxMessage is the envelope of the accepted event ev, its payload
// compacted, or errEnvelopeTooLarge.
func inboxMessage(id string, receivedAt time.Time, ev WorkflowJobEvent) ([]byte, error) {
	env := encodeDelivery(Delivery{ID: id, Event: EventWorkflowJob, ReceivedAt: receivedAt, Payload: compactPayload(ev)})
	if len(env) > MaxEnvelope {
		return nil, errEnvelopeTooLarge
	}
	return env, nil
}

// compactPayload renders ev as a workflow_job payload holding only the
// fields ParseWorkflowJob reads, which reads it back to ev. GitHub's own
// payload also holds the job's steps (with in_progress and completed: a
// long job's can take hundreds of kilobytes) and the repository, sender and
// organization in full, none of which bullpen reads.
func compactPayload(ev WorkflowJobEvent) []byte {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Format(time.RFC3339Nano)
	}
	type repository struct {
		FullName string `json:"full_name"`
	}
	type job struct {
		ID           int64    `json:"id"`
		RunID        int64    `json:"run_id"`
		RunAttempt   int      `json:"run_attempt,omitempty"`
		Name         string   `json:"name,omitempty"`
		WorkflowName string   `json:"workflow_name,omitempty"`
		Status       string   `json:"status,omitempty"`
		Conclusion   string   `json:"conclusion,omitempty"`
		Labels       []string `json:"labels"`
		RunnerID     int64    `json:"runner_id,omitempty"`
		RunnerName   string   `json:"runner_name,omitempty"`
		HeadBranch   string   `json:"head_branch,omitempty"`
		HTMLURL      string   `json:"html_url,omitempty"`
		CreatedAt    string   `json:"created_at,omitempty"`
		StartedAt    string   `json:"started_at,omitempty"`
		CompletedAt  string   `json:"completed_at,omitempty"`
	}
	w := ev.Job
	labels := w.Labels
	if labels == nil {
		labels = []string{}
	}
	// Strings and numbers only: marshalling cannot fail.
	b, _ := json.Marshal(struct {
		Action      string     `json:"action"`
		WorkflowJob job        `json:"workflow_job"`
		Repository  repository `json:"repository"`
	}{
		Action: ev.Action,
		WorkflowJob: job{ID: w.ID, RunID: w.RunID, RunAttempt: w.RunAttempt, Name: w.Name, WorkflowName: w.WorkflowName,
			Status: w.Status, Conclusion: w.Conclusion, Labels: labels, RunnerID: w.RunnerID, RunnerName: w.RunnerName,
			HeadBranch: w.HeadBranch, HTMLURL: w.HTMLURL,
			CreatedAt: ts(w.CreatedAt), StartedAt: ts(w.StartedAt), CompletedAt: ts(w.CompletedAt)},
		Repository: repository{FullName: ev.Repo},
	})
	return b
}

// encodeDelivery renders d, whose payload is JSON, for the inbox. Unlike
// json.Marshal, which compacts a RawMessage and escapes HTML characters, it
// keeps the payload byte for byte. Whitespace around the payload is
// dropped.
func encodeDelivery(d Delivery) []byte {
	d.Payload = trimJSONSpace(d.Payload)
	var b bytes.Buffer
	b.Grow(len(d.Payload) + len(d.ID) + len(d.Event) + 96)
	b.WriteString(`{"id":`)
	b.Write(quote(d.ID))
	b.WriteString(`,"event":`)
	b.Write(quote(d.Event))
	b.WriteString(`,"received_at":`)
	b.WriteString(strconv.Quote(d.ReceivedAt.UTC().Format(time.RFC3339Nano)))
	b.WriteString(`,"payload":`)
	b.Write(d.Payload)
	b.WriteString("}")
	return b.Bytes()
}

// quote renders s as a JSON string. Marshalling a string cannot fail.
func quote(s string) []byte {
	q, _ := json.Marshal(s)
	return q
}

// DecodeDelivery reads an inbox message body back into a Delivery. The
// payload is the bytes that were received, less surrounding whitespace.
func DecodeDelivery(body []byte) (Delivery, error) {
	var d Delivery
	if err := json.Unmarshal(body, &d); err != nil {
		return Delivery{}, fmt.Errorf("%w: %w", ErrInvalidDelivery, err)
	}
	switch {
	case d.ID == "":
		return Delivery{}, fmt.Errorf("%w: id is missing", ErrInvalidDelivery)
	case d.Event == "":
		return Delivery{}, fmt.Errorf("%w: event is missing", ErrInvalidDelivery)
	case len(d.Payload) == 0 || string(d.Payload) == "null":
		return Delivery{}, fmt.Errorf("%w: payload is missing", ErrInvalidDelivery)
	}
	return d, nil
}

// trimJSONSpace drops the whitespace JSON allows around a value: a decoder
// never returns it as part of a RawMessage.
func trimJSONSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}
