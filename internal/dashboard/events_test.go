package dashboard

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// stream is one open /events connection; its updates arrive on versions.
type stream struct {
	versions chan string
	body     io.ReadCloser
}

func openStream(t *testing.T, base string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("/events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &stream{versions: make(chan string, 64), body: resp.Body}
	go func() {
		defer close(s.versions)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				s.versions <- v
			}
		}
	}()
	return s
}

// next waits for the stream's next update; the deadline only bounds a
// failure.
func (s *stream) next(t *testing.T) string {
	t.Helper()
	select {
	case v, ok := <-s.versions:
		if !ok {
			t.Fatal("the stream ended")
		}
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no update within 10 s")
	}
	return ""
}

// However many pages are open, live updates read the store at most once
// per refresh interval: one snapshot of snapshotQueries queries, shared.
func TestLiveUpdatesCostLessThanAQueryPerSecondPerPage(t *testing.T) {
	t.Parallel()
	for _, pages := range []int{1, 8} {
		r := newRig(t)
		r.seed()
		srv := httptest.NewServer(r.d)
		r.page("/") // the first snapshot
		streams := make([]*stream, pages)
		paths := []string{"/", "/jobs", "/instances", "/jobs/102"}
		for k := range streams {
			streams[k] = openStream(t, srv.URL)
			streams[k].next(t) // the version in hand on connecting
		}
		before := r.counting.n.Load()
		const ticks = 24 // two minutes of updates
		for range ticks {
			r.clk.BlockUntil(1) // the hub waits for its next tick
			r.clk.Advance(DefaultRefresh)
			for k, s := range streams {
				s.next(t)
				fragmentBody(t, srv.URL, paths[k%len(paths)])
			}
		}
		queries := r.counting.n.Load() - before
		elapsed := (ticks * DefaultRefresh).Seconds()
		perPage := float64(queries) / elapsed / float64(pages)
		t.Logf("%d pages: %d queries in %.0f s: %.3f per second per page", pages, queries, elapsed, perPage)
		if queries > ticks*snapshotQueries || perPage >= 1 {
			t.Errorf("%d pages: %d queries in %.0f s (%.2f per second per page), want at most %d",
				pages, queries, elapsed, perPage, ticks*snapshotQueries)
		}
		srv.CloseClientConnections()
		srv.Close()
	}
}

func TestPagesWithinTheIntervalShareOneSnapshot(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	r.page("/")
	before := r.counting.n.Load()
	for _, p := range pagePaths {
		r.page(p)
	}
	if n := r.counting.n.Load() - before; n != 0 {
		t.Errorf("%d queries for pages within the interval, want none", n)
	}
	r.later()
	r.page("/jobs")
	if n := r.counting.n.Load() - before; n != snapshotQueries {
		t.Errorf("%d queries after the interval, want one snapshot (%d)", n, snapshotQueries)
	}
}

func TestDrainEndsTheStreams(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	r.page("/")
	srv := httptest.NewServer(r.d)
	defer srv.Close()
	s := openStream(t, srv.URL)
	s.next(t)
	r.d.Drain()
	select {
	case _, ok := <-s.versions:
		if ok {
			t.Fatal("an update after the drain")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream is still open after the drain")
	}
	rec := r.do(httptest.NewRequest(http.MethodGet, "/events", nil), "Bearer "+adminToken)
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/events after the drain: %d, want 503", rec.Code)
	}
	if n := r.d.hub.listeners(); n != 0 {
		t.Errorf("%d listeners left", n)
	}
}

func (h *hub) listeners() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// failingStore stops answering while failing is set.
type failingStore struct {
	Store
	failing atomic.Bool
}

var errStoreDown = errors.New("database is locked")

func (f *failingStore) ListInstances(ctx context.Context, flt domain.InstanceFilter) ([]domain.Instance, error) {
	if f.failing.Load() {
		return nil, errStoreDown
	}
	return f.Store.ListInstances(ctx, flt)
}

// fragmentBody fetches a page's content the way the page's script does,
// and returns it with its version.
func fragmentBody(t *testing.T, base, path string) (body, version string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	req.Header.Set("X-Fragment", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("fragment %s: %d", path, resp.StatusCode)
	}
	return string(b), resp.Header.Get("X-Content-Version")
}

// An open page learns that the store stopped answering, and that it
// answers again: the stream announces both, and the content the page then
// fetches carries the warning, or no longer does.
func TestOpenPagesLearnThatTheStoreStoppedAndCameBack(t *testing.T) {
	t.Parallel()
	var fs *failingStore
	r := newRig(t, func(o *Options) { fs = &failingStore{Store: o.Store}; o.Store = fs })
	r.seed()
	srv := httptest.NewServer(r.d)
	defer func() { srv.CloseClientConnections(); srv.Close() }()
	_, fresh := fragmentBody(t, srv.URL, "/jobs")
	s := openStream(t, srv.URL)
	if v := s.next(t); v != fresh {
		t.Fatalf("version on connecting %q, want %q", v, fresh)
	}
	tick := func() string {
		t.Helper()
		r.clk.BlockUntil(1)
		r.clk.Advance(DefaultRefresh)
		return s.next(t)
	}
	fs.failing.Store(true)
	stale := tick()
	if stale == fresh {
		t.Fatalf("the stream still announces %q once the store stopped answering", stale)
	}
	body, v := fragmentBody(t, srv.URL, "/jobs")
	if v != stale || !strings.Contains(body, "The store did not answer; this is what it held at 09:00:00 UTC. Stale since 09:00 UTC.") {
		t.Errorf("stale fragment (version %q, announced %q) says: %.200s", v, stale, body)
	}
	if again := tick(); again != stale {
		t.Errorf("the version moved from %q to %q while the store stayed down", stale, again)
	}
	fs.failing.Store(false)
	back := tick()
	if back == stale {
		t.Fatalf("the stream still announces %q once the store answers again", back)
	}
	body, v = fragmentBody(t, srv.URL, "/jobs")
	if v != back || strings.Contains(body, "did not answer") {
		t.Errorf("after recovery the fragment (version %q, announced %q) still warns: %v", v, back, strings.Contains(body, "did not answer"))
	}
}

// Heartbeats alone do not change the version: open pages are not replaced
// at every tick while the fleet merely stays alive.
func TestHeartbeatsDoNotChangeTheVersion(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed()
	before := r.get("/instances").Header().Get("X-Content-Version")
	for _, id := range []string{"bp-hot1", "bp-stop1", "bp-cold1"} {
		if err := r.store.RecordHeartbeat(r.ctx, id, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	r.later()
	if after := r.get("/instances").Header().Get("X-Content-Version"); after != before {
		t.Errorf("heartbeats moved the version from %q to %q", before, after)
	}
}
