package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

const testSecret = "It's a Secret to Everybody"

var testStart = time.Date(2025, 3, 14, 15, 9, 26, 535000000, time.UTC)

// sqsMaxBody is the largest message SQS takes.
const sqsMaxBody = 256 << 10

// fakeQueue is an in-memory domain.Queue that keeps what was sent and drops
// a message whose dedup id its queue has already seen, as SQS FIFO queues
// and the SQLite queue do within their window. Like SQS, it refuses a body
// over sqsMaxBody.
type fakeQueue struct {
	mu    sync.Mutex
	fail  error
	sends int // Send calls, deduplicated or not
	msgs  map[string][]domain.SendRequest
	seen  map[string]bool
}

func newFakeQueue() *fakeQueue {
	return &fakeQueue{msgs: map[string][]domain.SendRequest{}, seen: map[string]bool{}}
}

func (q *fakeQueue) Send(_ context.Context, queue string, msgs []domain.SendRequest) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sends++
	if q.fail != nil {
		return q.fail
	}
	for _, m := range msgs {
		if len(m.Body) > sqsMaxBody {
			return fmt.Errorf("body of %d bytes is over SQS's %d", len(m.Body), sqsMaxBody)
		}
	}
	for _, m := range msgs {
		key := queue + "\x00" + m.DedupID
		if m.DedupID != "" && q.seen[key] {
			continue
		}
		q.seen[key] = true
		m.Body = bytes.Clone(m.Body)
		q.msgs[queue] = append(q.msgs[queue], m)
	}
	return nil
}

func (q *fakeQueue) sent(queue string) []domain.SendRequest {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]domain.SendRequest(nil), q.msgs[queue]...)
}

var errNotInFake = errors.New("not implemented by the fake queue")

func (q *fakeQueue) Receive(context.Context, string, int, time.Duration, time.Duration) ([]domain.Message, error) {
	return nil, errNotInFake
}
func (q *fakeQueue) Delete(context.Context, string, []string) error { return errNotInFake }
func (q *fakeQueue) ChangeVisibility(context.Context, string, string, time.Duration) error {
	return errNotInFake
}
func (q *fakeQueue) Stats(context.Context, string) (domain.QueueStats, error) {
	return domain.QueueStats{}, errNotInFake
}

var _ domain.Queue = (*fakeQueue)(nil)

// noopQueue accepts everything and keeps nothing, for the benchmark.
type noopQueue struct{ *fakeQueue }

func (noopQueue) Send(context.Context, string, []domain.SendRequest) error { return nil }

type rig struct {
	h     *Handler
	queue *fakeQueue
	clock *clock.Virtual
	reg   *prometheus.Registry
	logs  *testlog.Buffer
}

func newRig(t testing.TB) *rig {
	t.Helper()
	return newRigWith(t, Options{})
}

func newRigWith(t testing.TB, opts Options) *rig {
	t.Helper()
	r := &rig{queue: newFakeQueue(), clock: clock.NewVirtual(testStart), reg: prometheus.NewRegistry(), logs: &testlog.Buffer{}}
	log := slog.New(slog.NewJSONHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h, err := New(testSecret, r.queue, r.clock, log, r.reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.h = h
	return r
}

// headers for a delivery; empty values are left out.
func headers(event, delivery, signature string) http.Header {
	h := http.Header{}
	for k, v := range map[string]string{HeaderEvent: event, HeaderDelivery: delivery, HeaderSignature: signature} {
		if v != "" {
			h.Set(k, v)
		}
	}
	h.Set("Content-Type", "application/json")
	return h
}

func (r *rig) post(h http.Header, body io.Reader) *httptest.ResponseRecorder {
	return serve(r.h, deliveryRequest(h, body))
}

// deliveryRequest is a delivery of body, with headers hdr, as GitHub posts it.
func deliveryRequest(hdr http.Header, body io.Reader) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/webhook", body)
	req.Header = hdr
	return req
}

// serve has h answer req.
func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// validJob is a minimal workflow_job payload the handler accepts, as a map a
// test can break before encoding it.
func validJob() map[string]any {
	return map[string]any{
		"action": "queued",
		"workflow_job": map[string]any{
			"id": 42, "run_id": 7, "run_attempt": 1, "labels": []any{"runs-on=7/pool=small"},
			"name": "build", "workflow_name": "CI", "status": "queued", "conclusion": nil,
			"created_at": "2025-03-14T15:09:00Z", "started_at": nil, "completed_at": nil,
		},
		"repository": map[string]any{"full_name": "octo-org/app"},
	}
}

func encode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jobField(m map[string]any) map[string]any { return m["workflow_job"].(map[string]any) }
