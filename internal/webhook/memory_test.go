package webhook

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	rtmetrics "runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

// Unsigned bodies of the largest size, sent by many connections at once over
// a real server, cost the heap what the read slots keep, however many
// connections there are.
func TestUnsignedLargeBodiesHoldBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams a gigabyte over loopback")
	}
	const readers = 4
	// Each slot keeps at most MaxPayload, reached by doubling (the old
	// buffer is garbage as the new one fills); the slack covers the
	// connections' own buffers and the collector's headroom.
	bound := uint64(readers*2*MaxPayload + 24<<20)
	for _, conns := range []int{10, 40} {
		t.Run(fmt.Sprintf("%d connections", conns), func(t *testing.T) {
			h, err := New(testSecret, newFakeQueue(), clock.NewVirtual(testStart),
				slog.New(slog.DiscardHandler), prometheus.NewRegistry(), Options{Readers: readers})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			peak := peakHeapGrowth(t, bound, func(ctx context.Context) {
				postUnsigned(ctx, t, srv, conns, MaxBody)
			})
			t.Logf("%d connections × %d MiB unsigned: peak heap growth %.1f MiB (bound %.1f MiB)",
				conns, MaxBody>>20, mib(peak), mib(bound))
			if peak > bound {
				t.Fatalf("peak heap grew by %.1f MiB, want at most %.1f MiB", mib(peak), mib(bound))
			}
		})
	}
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// peakHeapGrowth runs load and returns the most the heap (live and not yet
// swept objects) grew above where it started. Once the growth passes bound
// the load's context ends, so a failing run stops before it exhausts the
// machine.
func peakHeapGrowth(t *testing.T, bound uint64, load func(context.Context)) uint64 {
	t.Helper()
	runtime.GC()
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		rtmetrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := read()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	sampled := make(chan uint64)
	go func() {
		var peak uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if n := read(); n > base && n-base > peak {
				peak = n - base
				if peak > bound {
					cancel()
				}
			}
			select {
			case <-done:
				sampled <- peak
				return
			case <-tick.C:
			}
		}
	}()
	load(ctx)
	close(done)
	return <-sampled
}

// postUnsigned sends conns requests at once, each with a body of size
// bytes generated as it is sent and a well-formed signature made with
// another secret, and checks each is refused 401 (unless ctx ended first).
func postUnsigned(ctx context.Context, t *testing.T, srv *httptest.Server, conns int, size int64) {
	t.Helper()
	sig := testfixtures.GoSign("not the secret", nil)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/webhook",
				io.LimitReader(&countingReader{}, size))
			if err != nil {
				errs <- err
				return
			}
			req.Header = headers(EventWorkflowJob, fmt.Sprintf("d-%d", i), sig)
			req.ContentLength = size
			resp, err := srv.Client().Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusUnauthorized {
				errs <- fmt.Errorf("request %d: status %d, want 401", i, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	close(errs)
	if ctx.Err() != nil {
		return // the bound was passed; the caller reports it
	}
	for err := range errs {
		t.Error(err)
	}
}
