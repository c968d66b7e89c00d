// Package keepalive keeps received queue messages invisible for as long as
// they are being worked on. A loop can then receive with a short
// visibility timeout — what a message taken by a process that died waits
// before another takes it — and still hold a message through work that
// lasts longer (a machine booting for its job).
package keepalive

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Held is a hold on messages in hand.
type Held interface {
	// Let drops receipts from the hold, before their messages are given a
	// visibility of their own (a retry's delay) that the next extension
	// would otherwise overwrite.
	Let(receipts ...string)
	// Stop ends the hold; it returns once the holder has stopped.
	Stop()
}

// Hold extends the visibility of the messages behind receipts by
// visibility every third of it, until it is stopped. A receipt the queue
// no longer knows (its message settled, or taken again after a stall) is
// dropped from the hold.
func Hold(q domain.Queue, clk domain.Clock, queue string, receipts []string, visibility time.Duration, log *slog.Logger) Held {
	h := &holder{q: q, clk: clk, queue: queue, held: append([]string(nil), receipts...), visibility: visibility, log: log}
	if len(receipts) == 0 || visibility <= 0 {
		h.stopped = true
		return h
	}
	h.mu.Lock()
	h.timer = clk.AfterFunc(visibility/3, h.extend)
	h.mu.Unlock()
	return h
}

// holder extends its receipts from a timer of the clock rather than a
// goroutine of its own, so that on a serial virtual clock its extensions
// take their turns with the simulation's other callbacks.
type holder struct {
	q          domain.Queue
	clk        domain.Clock
	queue      string
	visibility time.Duration
	log        *slog.Logger

	mu      sync.Mutex // held while extending, so that stop waits for it
	held    []string
	timer   domain.Timer
	stopped bool
}

func (h *holder) extend() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	if h.held = extend(h.q, h.queue, h.held, h.visibility, h.log); len(h.held) > 0 {
		h.timer = h.clk.AfterFunc(h.visibility/3, h.extend)
	}
}

func (h *holder) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	if h.timer != nil {
		h.timer.Stop()
	}
}

func (h *holder) Let(receipts ...string) {
	h.mu.Lock() // waits for an extension in progress
	defer h.mu.Unlock()
	h.held = slices.DeleteFunc(h.held, func(r string) bool { return slices.Contains(receipts, r) })
}

// extend extends each receipt's visibility and returns those still held.
func extend(q domain.Queue, queue string, receipts []string, visibility time.Duration, log *slog.Logger) []string {
	ctx, cancel := context.WithTimeout(context.Background(), visibility/3)
	defer cancel()
	kept := receipts[:0]
	failed := 0
	var first error
	for _, r := range receipts {
		err := q.ChangeVisibility(ctx, queue, r, visibility)
		switch {
		case err == nil:
			kept = append(kept, r)
		case errors.Is(err, domain.ErrStaleReceipt):
		default:
			kept = append(kept, r) // tried again next time; the message may come back meanwhile
			if failed++; first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		// One line per round, however many messages are held: a queue that
		// stopped answering would otherwise log once per message.
		log.Warn("keep messages in hand invisible", "queue", queue, "failed", failed, "held", len(receipts), "err", first)
	}
	return kept
}
