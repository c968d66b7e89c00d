package agentapi

import "sync"

// waiters lets long polls wait for a notice about their instance. Each
// cloud id has at most one entry, shared by its waiters and dropped by the
// last one to leave, so an instance that polls for hours and is never
// assigned anything holds nothing between polls.
type waiters struct {
	mu sync.Mutex
	m  map[string]*waitEntry
	// seq counts notices; recent are the last of them, by seq modulo
	// their number, so that a poll can tell whether a notice for its
	// instance came after it read the row and before it subscribed.
	seq    uint64
	recent [256]string
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
	w.seq++
	w.recent[w.seq%uint64(len(w.recent))] = id
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

// mark returns how many notices there have been so far.
func (w *waiters) mark() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq
}

// wokenSince reports whether a notice for id may have come since mark:
// one did, or more came than are remembered.
func (w *waiters) wokenSince(id string, mark uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seq-mark > uint64(len(w.recent)) {
		return true
	}
	for n := mark + 1; n <= w.seq; n++ {
		if w.recent[n%uint64(len(w.recent))] == id {
			return true
		}
	}
	return false
}
