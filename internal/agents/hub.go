package agents

import "sync"

// Hub lets a goroutine wait for an instance's registration.
type Hub struct {
	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{waiters: map[string][]chan struct{}{}} }

// Wait returns a channel closed at the next Publish for id.
func (h *Hub) Wait(id string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan struct{})
	h.waiters[id] = append(h.waiters[id], ch)
	return ch
}

// Publish wakes every waiter of id.
func (h *Hub) Publish(id string) {
	h.mu.Lock()
	ws := h.waiters[id]
	delete(h.waiters, id)
	h.mu.Unlock()
	for _, ch := range ws {
		close(ch)
	}
}

// Forget drops the waiters of id (a caller that gave up).
func (h *Hub) Forget(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.waiters, id)
}
