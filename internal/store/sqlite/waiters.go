package sqlite

import "sync"

// waiters wakes long polls when their queue changes. Each queue has at most
// one channel, shared by everyone waiting on it and closed (then forgotten)
// by the next change, so a notification costs nothing when nobody waits.
type waiters struct {
	mu     sync.Mutex
	chans  map[string]chan struct{}
	closed bool
}

// closedChan is what watch returns once the store is closed, so that a
// waiter wakes at once and finds the store closed.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// watch returns a channel closed at the next notify of queue. Take it before
// looking at the queue, so that a change in between is not missed.
func (w *waiters) watch(queue string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return closedChan
	}
	if w.chans == nil {
		w.chans = map[string]chan struct{}{}
	}
	ch, ok := w.chans[queue]
	if !ok {
		ch = make(chan struct{})
		w.chans[queue] = ch
	}
	return ch
}

// notify wakes everyone watching queue.
func (w *waiters) notify(queue string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.chans[queue]; ok {
		close(ch)
		delete(w.chans, queue)
	}
}

// closeAll wakes every waiter for good.
func (w *waiters) closeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, ch := range w.chans {
		close(ch)
	}
	w.chans = nil
}
