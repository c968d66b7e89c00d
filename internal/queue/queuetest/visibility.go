package queuetest

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// A consumer that dies holding a message loses it after the visibility
// timeout: the message comes back with a new receipt, and the dead
// consumer's receipt no longer changes it.
func testVisibilityExpiry(t *testing.T, e *env) {
	e.sendBodies("work", "x")
	first := e.only("work", 30*time.Second, "x")[0]
	e.advance(29 * time.Second)
	e.nothing("work")
	e.advance(time.Second)

	second := e.only("work", 30*time.Second, "x")[0]
	redelivered(t, first, second)
	e.stale("work", first.Receipt)
	e.changeVisibility("work", second.Receipt, 0)
	third := e.receiveN("work", 1, time.Minute)
	// A stale receipt is ignored by Delete (SQS accepts it and may or may
	// not delete: what happens to the message is not part of the
	// contract, so the current receipt deletes it after).
	e.delete("work", first)
	e.delete("work", third...)
	e.advance(time.Hour)
	e.nothing("work")
}

func testChangeVisibilityZero(t *testing.T, e *env) {
	e.sendBodies("work", "retry me")
	held := e.only("work", time.Hour, "retry me")[0]
	e.changeVisibility("work", held.Receipt, 0)

	redelivered(t, held, e.only("work", time.Hour, "retry me")[0])
	e.stale("work", held.Receipt)
}

// redelivered fails unless again is first handed out a second time, with a
// receipt of its own.
func redelivered(t *testing.T, first, again domain.Message) {
	t.Helper()
	if again.ID != first.ID || again.Receives != 2 || again.Receipt == first.Receipt {
		t.Fatalf("redelivery: id %s receives %d receipt %q; want id %s, receives 2, a new receipt",
			again.ID, again.Receives, again.Receipt, first.ID)
	}
}

// The new timeout counts from the call, not from the receive.
func testChangeVisibilityExtends(t *testing.T, e *env) {
	e.sendBodies("work", "slow")
	held := e.only("work", 10*time.Second, "slow")[0]
	e.advance(5 * time.Second)
	e.changeVisibility("work", held.Receipt, time.Minute)

	e.advance(time.Minute - time.Second) // 64 s after the receive
	e.nothing("work")
	e.changeVisibility("work", held.Receipt, 2*time.Minute) // still in flight: still current
	e.advance(2*time.Minute - time.Second)
	e.nothing("work")
	e.advance(time.Second)
	if got := e.only("work", time.Hour, "slow")[0]; got.Receives != 2 {
		t.Fatalf("receives %d, want 2", got.Receives)
	}
}

func testChangeVisibilityShortens(t *testing.T, e *env) {
	e.sendBodies("work", "quick")
	held := e.only("work", time.Hour, "quick")[0]
	e.changeVisibility("work", held.Receipt, 10*time.Second)
	e.advance(9 * time.Second)
	e.nothing("work")
	e.advance(time.Second)
	e.only("work", time.Hour, "quick")
}

func testDeletedReceiptStale(t *testing.T, e *env) {
	e.sendBodies("work", "done")
	held := e.only("work", time.Hour, "done")[0]
	e.delete("work", held)
	e.stale("work", held.Receipt)
	// Deleting twice is harmless.
	e.delete("work", held)
}
