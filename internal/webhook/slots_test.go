package webhook

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

// stalledBody is a body whose sender sends nothing until released.
type stalledBody struct {
	reading chan struct{} // closed at the first Read: the request holds a slot
	once    sync.Once
	release chan struct{}
}

func newStalledBody(release chan struct{}) *stalledBody {
	return &stalledBody{reading: make(chan struct{}), release: release}
}

func (b *stalledBody) Read([]byte) (int, error) {
	b.once.Do(func() { close(b.reading) })
	<-b.release
	return 0, io.EOF
}

// fillSlots starts readers requests whose bodies stall, and returns once
// each holds a read slot. Closing the returned channel lets them finish;
// wait then waits for their answers.
func fillSlots(t *testing.T, r *rig, readers int) (release chan struct{}, wait func()) {
	t.Helper()
	release = make(chan struct{})
	var wg sync.WaitGroup
	sig := testfixtures.GoSign("not the secret", nil)
	for range readers {
		body := newStalledBody(release)
		wg.Go(func() { r.post(headers(EventWorkflowJob, "d-stalled", sig), body) })
		<-body.reading
	}
	return release, wg.Wait
}

// serveAsync answers req in its own goroutine.
func serveAsync(r *rig, req *http.Request) <-chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		r.h.ServeHTTP(rec, req)
		done <- rec
	}()
	return done
}

func signedRequest(t *testing.T, ctx context.Context, delivery string) *http.Request {
	t.Helper()
	body := encode(t, validJob())
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/webhook", bytes.NewReader(body))
	req.Header = headers(EventWorkflowJob, delivery, testfixtures.GoSign(testSecret, body))
	return req
}

// With every read slot held by a stalled sender, one more request waits
// for a slot, then is answered 503 with Retry-After without its body being
// read; the stalled ones are unaffected.
func TestRequestBeyondTheReadSlotsWaitsThenIsRefused(t *testing.T) {
	const readers = 3
	r := newRigWith(t, Options{Readers: readers})
	release, wait := fillSlots(t, r, readers)

	unread := &countingReader{}
	req := deliveryRequest(headers(EventWorkflowJob, "d-late", testfixtures.GoSign("not the secret", nil)), unread)
	answer := serveAsync(r, req)
	r.clock.BlockUntil(1) // waiting for a slot
	select {
	case rec := <-answer:
		t.Fatalf("answered %d before its wait was up", rec.Code)
	default:
	}
	r.clock.Advance(DefaultReaderWait)
	rec := <-answer
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q, want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	if unread.n != 0 {
		t.Errorf("%d bytes of the refused body read, want none", unread.n)
	}
	if got := testutil.ToFloat64(r.h.metrics.deliveries.WithLabelValues(EventWorkflowJob, OutcomeBusy)); got != 1 {
		t.Errorf("deliveries{outcome=busy} = %v, want 1", got)
	}
	if !strings.Contains(r.logs.String(), `"outcome":"busy"`) {
		t.Errorf("refusal not logged: %s", r.logs)
	}
	close(release)
	wait()
	if got := testutil.ToFloat64(r.h.metrics.deliveries.WithLabelValues(EventWorkflowJob, OutcomeUnauthorized)); got != readers {
		t.Errorf("deliveries{outcome=unauthorized} = %v, want %d", got, readers)
	}
}

// A request waiting for a slot takes the first one freed and is served.
func TestRequestWaitingForAReadSlotIsServedWhenOneFrees(t *testing.T) {
	r := newRigWith(t, Options{Readers: 1})
	release, wait := fillSlots(t, r, 1)
	answer := serveAsync(r, signedRequest(t, context.Background(), "d-waited"))
	r.clock.BlockUntil(1)
	close(release)
	wait()
	if rec := <-answer; rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s, want 202", rec.Code, rec.Body)
	}
	if n := r.clock.Pending(); n != 0 {
		t.Errorf("%d timers left pending, want none", n)
	}
}

// A sender that hangs up while waiting for a slot is let go at once.
func TestRequestWaitingForAReadSlotEndsWithItsContext(t *testing.T) {
	r := newRigWith(t, Options{Readers: 1})
	release, wait := fillSlots(t, r, 1)
	defer wait()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	answer := serveAsync(r, signedRequest(t, ctx, "d-gone"))
	r.clock.BlockUntil(1)
	cancel()
	if rec := <-answer; rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", rec.Code)
	}
	if got := len(r.queue.sent(domain.QueueInbox)); got != 0 {
		t.Errorf("%d messages stored, want none", got)
	}
}
