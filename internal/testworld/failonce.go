package testworld

import "sync"

// FailOnce arms a fake's failure for the next call: a store wrapper that
// embeds it fails the call for which Fire reports true, and passes the
// others through. It is safe for the loops' goroutines.
type FailOnce struct {
	mu    sync.Mutex
	armed bool
}

// Arm makes the next Fire report true.
func (f *FailOnce) Arm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = true
}

// Fire reports whether this call is the one to fail, and disarms.
func (f *FailOnce) Fire() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	armed := f.armed
	f.armed = false
	return armed
}
