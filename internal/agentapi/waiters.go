package agentapi

import "sync"

// waiters lets long polls wait for a notice about their instance. Each
// cloud id has at most one entry, shared by its waiters and dropped by the
// last one to leave, so an instance that polls for hours and is never
// assigned anything holds nothing between polls.
type waiters struct {
	mu sync.Mutex
	m  map[string]*waitEntry
}

type waitEntry struct {
	ch chan struct{} // closed by wake
	n  int           // waiters holding the entry
}

func (w *waiters) subscribe(id string) *waitEntry {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[id]
	if e == nil {
		e = &waitEntry{ch: make(chan struct{})}
		w.m[id] = e
	}
	e.n++
	return e
}

// unsubscribe leaves e; an entry already woken is gone from the map.
func (w *waiters) unsubscribe(id string, e *waitEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[id] != e {
		return
	}
	if e.n--; e.n == 0 {
		delete(w.m, id)
	}
}

func (w *waiters) wake(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[id]; e != nil {
		delete(w.m, id)
		close(e.ch)
	}
}

// waiting returns the cloud ids that have a long poll waiting.
func (w *waiters) waiting() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]bool, len(w.m))
	for id := range w.m {
		out[id] = true
	}
	return out
}
