package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

func examples(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	for _, e := range testfixtures.WorkflowJobExamples(t) {
		out = append(out, []byte(e))
	}
	return out
}

var signed struct {
	sync.Mutex
	bodies [][]byte
	sigs   []string
}

// signedExamples returns the real examples and their signatures by GitHub's
// code, signed once per test binary: each node process costs a fraction of
// a second.
func signedExamples(t testing.TB) ([][]byte, []string) {
	t.Helper()
	signed.Lock()
	defer signed.Unlock()
	if signed.bodies == nil {
		bodies := examples(t)
		signed.sigs = testfixtures.SignAll(t, testSecret, bodies)
		signed.bodies = bodies
	}
	return signed.bodies, signed.sigs
}

// Every real workflow_job example, signed by GitHub's code, is accepted and
// stored compacted: what the intake reads of it is what GitHub sent.
func TestRealExamplesAreAcceptedAndReadAsSent(t *testing.T) {
	r := newRig(t)
	bodies, sigs := signedExamples(t)
	for i, body := range bodies {
		id := fmt.Sprintf("example-%d", i)
		rec := r.post(headers("workflow_job", id, sigs[i]), bytes.NewReader(body))
		if rec.Code != http.StatusAccepted || rec.Body.String() != fmt.Sprintf("{\"accepted\":%q}\n", id) {
			t.Fatalf("example %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	sent := r.queue.sent(domain.QueueInbox)
	if len(sent) != len(bodies) {
		t.Fatalf("%d messages, want %d", len(sent), len(bodies))
	}
	for i, m := range sent {
		d, err := DecodeDelivery(m.Body)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		want := Delivery{ID: fmt.Sprintf("example-%d", i), Event: "workflow_job", ReceivedAt: testStart}
		if d.ID != want.ID || m.DedupID != want.ID || d.Event != want.Event || !d.ReceivedAt.Equal(want.ReceivedAt) {
			t.Errorf("message %d: %+v (dedup %q), want %+v", i, d, m.DedupID, want)
		}
		checkReadAsSent(t, d.Payload, bodies[i])
		checkParsedLikeGitHub(t, d.Payload)
		if len(d.Payload) >= len(bodies[i]) {
			t.Errorf("message %d: stored payload of %d bytes, the body %d", i, len(d.Payload), len(bodies[i]))
		}
	}
}

// checkReadAsSent checks that the stored payload parses to the event the
// signed body holds.
func checkReadAsSent(t *testing.T, stored, body []byte) {
	t.Helper()
	got, err := ParseWorkflowJob(stored)
	if err != nil {
		t.Fatalf("the stored payload does not parse: %v", err)
	}
	want, err := ParseWorkflowJob(body)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stored payload reads as\n%+v\nthe body as\n%+v", got, want)
	}
}

// checkParsedLikeGitHub compares ParseWorkflowJob with a plain decode.
func checkParsedLikeGitHub(t *testing.T, payload []byte) {
	t.Helper()
	ev, err := ParseWorkflowJob(payload)
	if err != nil {
		t.Fatal(err)
	}
	var plain struct {
		Action string `json:"action"`
		Job    struct {
			ID     int64    `json:"id"`
			RunID  int64    `json:"run_id"`
			Labels []string `json:"labels"`
			Status string   `json:"status"`
		} `json:"workflow_job"`
		Repo struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(payload, &plain); err != nil {
		t.Fatal(err)
	}
	if ev.Action != plain.Action || ev.Job.ID != plain.Job.ID || ev.Job.RunID != plain.Job.RunID ||
		ev.Repo != plain.Repo.FullName || ev.Job.Status != plain.Job.Status ||
		fmt.Sprint(ev.Job.Labels) != fmt.Sprint(plain.Job.Labels) {
		t.Errorf("parsed %+v, GitHub sent %+v", ev, plain)
	}
}

func TestTamperedBodyIsRefused(t *testing.T) {
	bodies, sigs := signedExamples(t)
	body, sig := bodies[0], sigs[0]
	for _, i := range []int{0, len(body) / 2, len(body) - 1} {
		r := newRig(t)
		tampered := bytes.Clone(body)
		tampered[i] ^= 0x01
		rec := r.post(headers("workflow_job", "d-1", sig), bytes.NewReader(tampered))
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("byte %d changed: status %d, want 401", i, rec.Code)
		}
		if r.queue.sends != 0 {
			t.Errorf("byte %d changed: the queue was called", i)
		}
	}
}

func TestRedeliveryStoresOneMessage(t *testing.T) {
	r := newRig(t)
	bodies, sigs := signedExamples(t)
	body, sig := bodies[5], sigs[5]
	for range 3 {
		rec := r.post(headers("workflow_job", "72d3162e-cc78-11e3-81ab-4c9367dc0958", sig), bytes.NewReader(body))
		if rec.Code != http.StatusAccepted {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
	if got := len(r.queue.sent(domain.QueueInbox)); got != 1 {
		t.Fatalf("%d messages after three deliveries of one id, want 1", got)
	}
}

// Many deliveries at once over a real HTTP server, each sent twice: every
// one is answered 202 and each id is stored once.
func TestConcurrentDeliveries(t *testing.T) {
	r := newRig(t)
	srv := httptest.NewServer(r.h)
	defer srv.Close()
	bodies, sigs := signedExamples(t)

	const deliveries = 100
	var wg sync.WaitGroup
	errs := make(chan error, 2*deliveries)
	for i := range 2 * deliveries {
		wg.Go(func() {
			n := i % deliveries
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/webhook", bytes.NewReader(bodies[n%len(bodies)]))
			if err != nil {
				errs <- err
				return
			}
			req.Header = headers("workflow_job", fmt.Sprintf("d-%03d", n), sigs[n%len(bodies)])
			resp, err := srv.Client().Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusAccepted {
				errs <- fmt.Errorf("delivery %d: %d %s", n, resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	sent := r.queue.sent(domain.QueueInbox)
	ids := map[string]bool{}
	for _, m := range sent {
		d, err := DecodeDelivery(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		ids[d.ID] = true
	}
	if len(sent) != deliveries || len(ids) != deliveries {
		t.Fatalf("%d messages with %d distinct ids, want %d", len(sent), len(ids), deliveries)
	}
}
