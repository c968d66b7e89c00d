package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// hub fans one snapshot out to every open page. While at least one page
// listens, it takes the snapshot every interval (a read of the store only
// when the cached one is older) and tells each page the version of the
// content; a page whose version differs fetches its new content, which is
// drawn from the same snapshot. However many pages are open, the store sees
// at most snapshotQueries queries per interval.
type hub struct {
	cache   *cache
	clock   domain.Clock
	every   time.Duration
	version func(*snapshot, error) string

	mu      sync.Mutex
	clients map[chan string]struct{}
	stop    chan struct{} // closes the running ticker; nil when none runs
	done    chan struct{} // closed by drain
	drained bool
}

func newHub(c *cache, clk domain.Clock, every time.Duration) *hub {
	return &hub{cache: c, clock: clk, every: every, clients: map[chan string]struct{}{}, done: make(chan struct{}),
		version: func(s *snapshot, _ error) string { return fmt.Sprint(s.gen) }}
}

// subscribe adds a listener and starts the ticker if it is the first; it
// reports false once the hub is drained.
func (h *hub) subscribe() (chan string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.drained {
		return nil, false
	}
	ch := make(chan string, 1)
	h.clients[ch] = struct{}{}
	if h.stop == nil {
		h.stop = make(chan struct{})
		go h.run(h.stop)
	}
	return ch, true
}

// unsubscribe removes a listener and stops the ticker after the last.
func (h *hub) unsubscribe(ch chan string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.clients, ch)
	if len(h.clients) == 0 && h.stop != nil {
		close(h.stop)
		h.stop = nil
	}
}

func (h *hub) run(stop chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-h.clock.After(h.every):
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.every)
		s, stale := h.cache.get(ctx)
		cancel()
		if s != nil {
			// Every tick, changed or not: an unchanged version costs the
			// page nothing and keeps idle connections open through proxies.
			// A store that stops answering, and one that answers again,
			// change the version, so that open pages say so.
			h.broadcast(h.version(s, stale))
		}
	}
}

// broadcast gives every listener the latest version, replacing one it has
// not read yet: a slow page skips versions, it never blocks the others.
func (h *hub) broadcast(v string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.clients {
		select {
		case <-ch:
		default:
		}
		ch <- v
	}
}

func (h *hub) drain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.drained {
		h.drained = true
		close(h.done)
	}
}

// Limits of one event stream. They are the connection's, so they run on
// the wall clock, like the server's own timeouts.
const (
	// streamWriteWindow: each update must reach the page within it (the
	// server's write timeout would otherwise end the stream); a page that
	// stops reading is dropped when it passes.
	streamWriteWindow = time.Minute
	// streamLifetime: a stream ends after it and the page reconnects, so
	// its session is checked again (an expired one is refused).
	streamLifetime = 10 * time.Minute
)

// events is the stream a page listens to: "update" events carrying the
// version of the content.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	ch, ok := d.hub.subscribe()
	if !ok {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	defer d.hub.unsubscribe(ch)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(v string) bool {
		// Only a writer without deadlines (a test recorder) refuses.
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteWindow))
		_, err := fmt.Fprintf(w, "event: update\ndata: %s\n\n", v)
		return err == nil && rc.Flush() == nil
	}
	lifetime := time.NewTimer(streamLifetime)
	defer lifetime.Stop()
	_ = rc.SetWriteDeadline(time.Now().Add(streamWriteWindow))
	fmt.Fprintf(w, "retry: %d\n\n", d.opts.Refresh.Milliseconds())
	if s, stale := d.cache.current(); s != nil {
		if !send(d.version(s, stale)) {
			return
		}
	} else if rc.Flush() != nil {
		return
	}
	for {
		select {
		case v := <-ch:
			if !send(v) {
				return
			}
		case <-r.Context().Done():
			return
		case <-d.hub.done:
			return
		case <-lifetime.C:
			return
		}
	}
}
