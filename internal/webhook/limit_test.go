package webhook

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

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
		{name: "workflow_job of MaxPayload is accepted whole", event: EventWorkflowJob, body: paddedJob(t, MaxPayload),
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
			// The envelope ends with the payload; decoding it is tested elsewhere.
			if len(sent) != 1 || !bytes.HasSuffix(sent[0].Body, append(tc.body, '}')) {
				t.Fatal("stored payload differs from the body")
			}
		})
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
