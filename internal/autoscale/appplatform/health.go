package appplatform

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// UnhealthyAfter failed cycles in a row make Health answer 503.
const UnhealthyAfter = 3

// Health is the autoscaler's health as /healthz reports it: unhealthy
// after UnhealthyAfter cycles in a row returned an error (transient or
// permanent), healthy again at the first cycle that did not. A cycle that
// waits out a rate limit, or leaves a decision to the next poll, is no
// failure. Feed it every cycle with Observe (Deps.OnCycle).
type Health struct {
	mu       sync.Mutex
	failures int
	last     error
	lastAt   time.Time
}

// Observe records one cycle's outcome.
func (h *Health) Observe(rep CycleReport, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.failures, h.last, h.lastAt = 0, nil, time.Time{}
		return
	}
	h.failures++
	h.last, h.lastAt = err, rep.At
}

// Status is "" when healthy, else one line saying why not.
func (h *Health) Status() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failures < UnhealthyAfter {
		return ""
	}
	return fmt.Sprintf("unhealthy: %d cycles in a row failed, the last at %s: %s",
		h.failures, h.lastAt.UTC().Format(time.RFC3339), oneLine(h.last.Error()))
}

// ServeHTTP answers 200 "ok", or 503 with the one line of Status.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s := h.Status(); s != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, s)
		return
	}
	fmt.Fprintln(w, "ok")
}

// oneLine joins the lines of a (joined) error and bounds its length.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const most = 300
	if r := []rune(s); len(r) > most {
		s = string(r[:most]) + "…"
	}
	return s
}
