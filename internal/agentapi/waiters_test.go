package agentapi

import "testing"

func TestWaitersHoldNothingBetweenPolls(t *testing.T) {
	w := waiters{m: map[string]*waitEntry{}}
	a1, a2 := w.subscribe("i-a"), w.subscribe("i-a")
	if a1 != a2 || w.len() != 1 {
		t.Fatal("two waiters of one instance should share an entry")
	}
	b := w.subscribe("i-b")
	w.wake("i-a")
	select {
	case <-a1.ch:
	default:
		t.Fatal("wake did not close i-a's channel")
	}
	select {
	case <-b.ch:
		t.Fatal("wake of i-a woke i-b")
	default:
	}
	// Leaving a woken entry is harmless; a new subscription is a new entry.
	w.unsubscribe("i-a", a1)
	w.unsubscribe("i-a", a2)
	if again := w.subscribe("i-a"); again == a1 {
		t.Fatal("a woken entry was reused")
	} else {
		w.unsubscribe("i-a", again)
	}
	w.unsubscribe("i-b", b)
	if w.len() != 0 {
		t.Fatalf("%d entries left after every waiter left", w.len())
	}
	w.wake("i-c") // nobody waits: nothing happens
}

// len reports how many instances have waiters (for tests).
func (w *waiters) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}
