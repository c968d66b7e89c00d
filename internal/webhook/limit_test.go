package webhook

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

// countingReader is an endless body that counts what was read from it.
type countingReader struct{ n int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	c.n += int64(len(p))
	return len(p), nil
}

// paddedJob is a valid workflow_job payload of exactly size bytes.
func paddedJob(t *testing.T, size int) []byte {
	t.Helper()
	// Built by hand: encoding/json takes seconds over megabytes under -race.
	small := encode(t, validJob())
	pad := bytes.Repeat([]byte("x"), size-len(small)-len(`"padding":"",`))
	body := append(append(append([]byte(`{"padding":"`), pad...), `",`...), small[1:]...)
	if len(body) != size {
		t.Fatalf("built %d bytes, want %d", len(body), size)
	}
	return body
}

// Every body up to MaxBody is read and verified whole; only the payloads
// bullpen parses are kept, up to MaxPayload.
func TestBodySizeLimits(t *testing.T) {
	cases := []struct {
		name   string
		event  string
		body   []byte
		secret string
		status int
		want   string
		stored bool
	}{
		{name: "workflow_job of MaxPayload is accepted", event: EventWorkflowJob, body: paddedJob(t, MaxPayload),
			secret: testSecret, status: http.StatusAccepted, want: `"accepted"`, stored: true},
		{name: "signed workflow_job over MaxPayload names the limit", event: EventWorkflowJob, body: paddedJob(t, MaxPayload+1),
			secret: testSecret, status: http.StatusRequestEntityTooLarge, want: "workflow_job payload may not exceed 1048576 bytes"},
		{name: "unsigned workflow_job of MaxBody is unauthorized", event: EventWorkflowJob, body: paddedJob(t, MaxBody),
			secret: "not the secret", status: http.StatusUnauthorized, want: "signature does not match"},
		{name: "signed other event of MaxBody is verified whole and ignored", event: "push", body: bytes.Repeat([]byte(" "), MaxBody),
			secret: testSecret, status: http.StatusAccepted, want: `"ignored":"push"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			rec := r.post(headers(tc.event, "d-big", testfixtures.GoSign(tc.secret, tc.body)), bytes.NewReader(tc.body))
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("status %d: %s, want %d with %q", rec.Code, rec.Body, tc.status, tc.want)
			}
			sent := r.queue.sent(domain.QueueInbox)
			if !tc.stored {
				if len(sent) != 0 {
					t.Fatalf("%d messages stored, want none", len(sent))
				}
				return
			}
			if len(sent) != 1 {
				t.Fatalf("%d messages stored, want 1", len(sent))
			}
			d, err := DecodeDelivery(sent[0].Body)
			if err != nil {
				t.Fatal(err)
			}
			checkReadAsSent(t, d.Payload, tc.body)
		})
	}
}

// withSteps is a completed job whose steps make its payload about size
// bytes, as a long job's do.
func withSteps(t *testing.T, size int) []byte {
	t.Helper()
	m := validJob()
	m["action"] = ActionCompleted
	jobField(m)["status"], jobField(m)["conclusion"] = "completed", "success"
	small := encode(t, m)
	// Built by hand: encoding/json takes seconds over megabytes under -race.
	step := []byte(`{"name":"Run make test","status":"completed","conclusion":"success","number":1,` +
		`"started_at":"2025-03-14T15:09:00Z","completed_at":"2025-03-14T15:09:01Z"},`)
	steps := bytes.TrimSuffix(bytes.Repeat(step, (size-len(small))/len(step)), []byte(","))
	field := []byte(`"workflow_job":{`)
	return bytes.Replace(small, field, slices.Concat(field, []byte(`"steps":[`), steps, []byte(`],`)), 1)
}

// The inbox holds only what bullpen reads of a delivery: a payload made
// large by its steps, over what SQS takes, is accepted and stored small.
func TestLargeStepsAreNotStored(t *testing.T) {
	r := newRig(t)
	body := withSteps(t, MaxPayload-1024)
	if len(body) <= sqsMaxBody {
		t.Fatalf("built %d bytes, want more than SQS takes", len(body))
	}
	rec := r.post(headers(EventWorkflowJob, "d-steps", testfixtures.GoSign(testSecret, body)), bytes.NewReader(body))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s, want 202", rec.Code, rec.Body)
	}
	sent := r.queue.sent(domain.QueueInbox)
	if len(sent) != 1 || len(sent[0].Body) > 1024 {
		t.Fatalf("%d messages stored (%v), want one of at most 1 KiB", len(sent), sent)
	}
	d, err := DecodeDelivery(sent[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	checkReadAsSent(t, d.Payload, body)
}

// What bullpen keeps of a delivery is refused as too large, naming the
// limit, when even compacted it is over what the inbox takes: the queue
// would refuse it at every redelivery.
func TestEnvelopeOverMaxEnvelopeIsRefused(t *testing.T) {
	m := validJob()
	var labels []any
	for range MaxEnvelope / 1000 {
		labels = append(labels, strings.Repeat("x", 1000))
	}
	jobField(m)["labels"] = labels
	body := encode(t, m)
	r := newRig(t)
	rec := r.post(headers(EventWorkflowJob, "d-labels", testfixtures.GoSign(testSecret, body)), bytes.NewReader(body))
	want := fmt.Sprintf("the workflow_job fields bullpen keeps (its labels and names) exceed %d bytes", MaxEnvelope)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("status %d: %s, want 413 naming the limit", rec.Code, rec.Body)
	}
	if r.queue.sends != 0 {
		t.Fatal("the queue was called")
	}
	if got := testutil.ToFloat64(r.h.metrics.deliveries.WithLabelValues(EventWorkflowJob, OutcomeTooLarge)); got != 1 {
		t.Errorf("too_large counted %v, want 1", got)
	}
	q := newFakeQueue()
	if err := Enqueue(context.Background(), q, testStart, "d-labels", body); err == nil || q.sends != 0 {
		t.Errorf("Enqueue: %v after %d sends, want the limit's error and none", err, q.sends)
	}
}

func TestBodyOverMaxSizeIsRefused(t *testing.T) {
	sig := testfixtures.GoSign(testSecret, []byte("whatever"))
	t.Run("declared length", func(t *testing.T) {
		r := newRig(t)
		body := &countingReader{}
		req := deliveryRequest(headers("workflow_job", "d-1", sig), body)
		req.ContentLength = MaxBody + 1
		rec := serve(r.h, req)
		if rec.Code != http.StatusRequestEntityTooLarge || body.n != 0 {
			t.Fatalf("status %d after reading %d bytes, want 413 after none", rec.Code, body.n)
		}
	})
	t.Run("endless body of unknown length", func(t *testing.T) {
		r := newRig(t)
		body := &countingReader{}
		req := deliveryRequest(headers("workflow_job", "d-1", sig), body)
		req.ContentLength = -1
		rec := serve(r.h, req)
		if rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413", rec.Code)
		}
		if body.n > MaxBody+1 {
			t.Fatalf("read %d bytes, want at most %d", body.n, MaxBody+1)
		}
		if r.queue.sends != 0 {
			t.Fatal("the queue was called")
		}
	})
	t.Run("one byte over, correctly signed", func(t *testing.T) {
		r := newRig(t)
		body := bytes.Repeat([]byte(" "), MaxBody+1)
		rec := r.post(headers("workflow_job", "d-1", testfixtures.GoSign(testSecret, body)), bytes.NewReader(body))
		if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "exceeds") {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}

// Every delivery series is served from the start at zero, so that the
// first refused delivery is an increase an alert sees.
func TestDeliverySeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.deliveries); n != 5*7 {
		t.Fatalf("%d delivery series at start, want every event and outcome (35)", n)
	}
	if got := testutil.ToFloat64(m.deliveries.WithLabelValues(EventWorkflowJob, OutcomeUnauthorized)); got != 0 {
		t.Fatalf("unauthorized workflow_job deliveries at start: %v, want 0", got)
	}
}
