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
	_, back := r.fail(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC), false)
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

// A failure the control plane answered itself opens no backoff that a call
// answered can end: the call that failed so waits out its own backoff, and
// a call sent between it and a later failure that got no answer does not
// end the later failure's backoff.
func TestAFailureTheControlPlaneAnsweredOpensNoBackoffToEnd(t *testing.T) {
	r := reachability{log: slog.New(slog.DiscardHandler)}
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	if _, back := r.fail(at, true); back != nil {
		t.Fatal("a failure the control plane answered got a backoff that an answered call ends")
	}
	sentBetween := r.mark()
	_, back := r.fail(at.Add(time.Second), false)
	r.ok(sentBetween)
	select {
	case <-back:
		t.Fatal("a call sent before the unanswered failure ended its backoff")
	default:
	}
	r.ok(r.mark())
	select {
	case <-back:
	default:
		t.Fatal("a call sent after the unanswered failure left its backoff running")
	}
}
