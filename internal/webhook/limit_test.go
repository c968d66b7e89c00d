package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
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

// A body of exactly MaxBody is accepted whole.
func TestBodyOfMaxSizeIsAccepted(t *testing.T) {
	r := newRig(t)
	// Built by hand: encoding/json takes seconds over 25 MiB under -race.
	small := encode(t, validJob())
	pad := bytes.Repeat([]byte("x"), MaxBody-len(small)-len(`"padding":"",`))
	body := append(append(append([]byte(`{"padding":"`), pad...), `",`...), small[1:]...)
	if len(body) != MaxBody {
		t.Fatalf("built %d bytes, want %d", len(body), MaxBody)
	}
	rec := r.post(headers("workflow_job", "d-big", goSign(testSecret, body)), bytes.NewReader(body))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	// The envelope ends with the payload; decoding it is tested elsewhere.
	stored := r.queue.sent(domain.QueueInbox)[0].Body
	if !bytes.HasSuffix(stored, append(body, '}')) {
		t.Fatal("stored payload differs from the body")
	}
}

func TestBodyOverMaxSizeIsRefused(t *testing.T) {
	sig := goSign(testSecret, []byte("whatever"))
	t.Run("declared length", func(t *testing.T) {
		r := newRig(t)
		body := &countingReader{}
		req := httptest.NewRequest(http.MethodPost, "/webhook", body)
		req.Header = headers("workflow_job", "d-1", sig)
		req.ContentLength = MaxBody + 1
		rec := httptest.NewRecorder()
		r.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge || body.n != 0 {
			t.Fatalf("status %d after reading %d bytes, want 413 after none", rec.Code, body.n)
		}
	})
	t.Run("endless body of unknown length", func(t *testing.T) {
		r := newRig(t)
		body := &countingReader{}
		req := httptest.NewRequest(http.MethodPost, "/webhook", body)
		req.Header = headers("workflow_job", "d-1", sig)
		req.ContentLength = -1
		rec := httptest.NewRecorder()
		r.h.ServeHTTP(rec, req)
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
		rec := r.post(headers("workflow_job", "d-1", goSign(testSecret, body)), bytes.NewReader(body))
		if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "exceeds") {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}
