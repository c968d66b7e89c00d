package agent

import (
	"log/slog"
	"testing"
	"time"
)

// Only a call sent after a failure, and answered, ends the failure's
// backoff: one answered late but sent before says nothing of the control
// plane since.
func TestOnlyACallSentAfterAFailureEndsItsBackoff(t *testing.T) {
	r := reachability{log: slog.New(slog.DiscardHandler)}
	sentBefore := r.mark()
	_, back := r.fail(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	r.ok(sentBefore)
	select {
	case <-back:
		t.Fatal("a call sent before the failure ended its backoff")
	default:
	}
	r.ok(r.mark())
	select {
	case <-back:
	default:
		t.Fatal("a call sent after the failure left its backoff running")
	}
}
