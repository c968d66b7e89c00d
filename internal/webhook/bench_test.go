package webhook

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
)

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

func benchHandler(b *testing.B) (*Handler, []byte, string) {
	h, err := New(testSecret, noopQueue{newFakeQueue()}, clock.NewVirtual(testStart),
		slog.New(slog.DiscardHandler), prometheus.NewRegistry(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	bodies, sigs := signedExamples(b)
	return h, bodies[5], sigs[5]
}

// BenchmarkHandler measures a whole accepted delivery (verify, parse,
// envelope) with a queue that costs nothing.
func BenchmarkHandler(b *testing.B) {
	h, body, sig := benchHandler(b)
	hdr := headers("workflow_job", "72d3162e-cc78-11e3-81ab-4c9367dc0958", sig)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if rec := serve(h, deliveryRequest(hdr, bytes.NewReader(body))); rec.Code != http.StatusAccepted {
			b.Fatalf("status %d", rec.Code)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
}

func BenchmarkHandlerParallel(b *testing.B) {
	h, body, sig := benchHandler(b)
	hdr := headers("workflow_job", "72d3162e-cc78-11e3-81ab-4c9367dc0958", sig)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if rec := serve(h, deliveryRequest(hdr, bytes.NewReader(body))); rec.Code != http.StatusAccepted {
				b.Errorf("status %d", rec.Code)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
}
