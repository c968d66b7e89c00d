package queuetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func testSendReceiveDelete(t *testing.T, e *env) {
	e.sendBodies("work", "a", "b", "c")
	got := e.only("work", 30*time.Second, "a", "b", "c")
	receiptSeen := map[string]bool{}
	for _, m := range got {
		if m.ID == "" || m.Receipt == "" || receiptSeen[m.Receipt] {
			t.Fatalf("message %q: id %q receipt %q; want both set and receipts distinct", m.Body, m.ID, m.Receipt)
		}
		receiptSeen[m.Receipt] = true
		if m.Receives != 1 {
			t.Fatalf("message %q: receives %d, want 1", m.Body, m.Receives)
		}
		// SQS keeps send times to the millisecond.
		if d := m.SentAt.Sub(start); d < 0 || d >= time.Millisecond {
			t.Fatalf("message %q: sent at %v, want %v", m.Body, m.SentAt, start)
		}
	}
	e.delete("work", got...)
	// Deleted messages stay deleted once their visibility would have run out.
	e.advance(time.Hour)
	e.nothing("work")
}

func testSendAllOrNone(t *testing.T, e *env) {
	for what, bad := range map[string]domain.SendRequest{
		"a negative delay":        {Body: []byte("negative delay"), Delay: -time.Second},
		"a body over the largest": {Body: bytes.Repeat([]byte("x"), domain.MaxMessageBody+1)},
	} {
		if err := e.q.Send(e.ctx, "work", []domain.SendRequest{{Body: []byte("fine")}, bad}); err == nil {
			t.Fatalf("a send with %s succeeded", what)
		}
	}
	e.advance(time.Minute)
	e.nothing("work")
	largest := bytes.Repeat([]byte("x"), domain.MaxMessageBody)
	e.send("work", domain.SendRequest{Body: largest})
	if got := e.receive("work", 1, time.Minute); len(got) != 1 || len(got[0].Body) != domain.MaxMessageBody {
		t.Fatalf("the largest body: received %d messages", len(got))
	}
}

func testSendNothing(t *testing.T, e *env) {
	if err := e.q.Send(e.ctx, "work", nil); err != nil {
		t.Fatalf("send nothing: %v", err)
	}
	if err := e.q.Delete(e.ctx, "work", nil); err != nil {
		t.Fatalf("delete nothing: %v", err)
	}
	e.nothing("work")
}

func testDelay(t *testing.T, e *env) {
	e.send("work",
		domain.SendRequest{Body: []byte("later"), Delay: 10 * time.Second},
		domain.SendRequest{Body: []byte("now")},
		domain.SendRequest{Body: []byte("much later"), Delay: 15 * time.Minute})
	e.delete("work", e.only("work", time.Hour, "now")...)

	e.advance(9 * time.Second)
	e.nothing("work")
	e.advance(time.Second)
	later := e.only("work", time.Hour, "later")
	if later[0].Receives != 1 {
		t.Fatalf("delayed message: receives %d, want 1", later[0].Receives)
	}
	e.advanceTo(start.Add(15*time.Minute - time.Second))
	e.nothing("work")
	e.advanceTo(start.Add(15 * time.Minute))
	e.only("work", time.Hour, "much later")
}

func dedup(body, id string) domain.SendRequest {
	return domain.SendRequest{Body: []byte(body), DedupID: id}
}

// Webhook redeliveries carry the same dedup id: within five minutes of the
// first, later copies are dropped, in the same batch or not, even once the
// first was deleted; other ids, other queues and messages without an id
// are not affected. The dedup contracts run on e.dedup, a queue the
// implementation deduplicates.
func testDedupWithinWindow(t *testing.T, e *env) {
	e.send(e.dedup, dedup("first", "d1"), dedup("same batch", "d1"), dedup("other id", "d2"),
		domain.SendRequest{Body: []byte("plain")}, domain.SendRequest{Body: []byte("plain")})
	e.send("other", dedup("other queue", "d1"))
	e.advance(time.Minute)
	e.send(e.dedup, dedup("a minute later", "d1"))

	e.delete(e.dedup, e.only(e.dedup, time.Hour, "first", "other id", "plain", "plain")...)
	e.only("other", time.Hour, "other queue")

	e.advanceTo(start.Add(5*time.Minute - time.Second))
	e.send(e.dedup, dedup("after the first was deleted", "d1"))
	e.nothing(e.dedup)
}

func testDedupAfterWindow(t *testing.T, e *env) {
	e.send(e.dedup, dedup("first", "d1"))
	e.advance(2 * time.Minute)
	e.send(e.dedup, dedup("dropped", "d1")) // does not extend the window
	e.delete(e.dedup, e.only(e.dedup, time.Hour, "first")...)

	e.advanceTo(start.Add(5*time.Minute + time.Second))
	e.send(e.dedup, dedup("second", "d1"))
	e.only(e.dedup, time.Hour, "second")
}

func testStats(t *testing.T, e *env) {
	e.stats("work", domain.QueueStats{})
	e.stats("never-used", domain.QueueStats{})
	e.sendBodies("work", "a", "b")
	e.send("work", domain.SendRequest{Body: []byte("delayed"), Delay: 30 * time.Second})
	e.stats("work", domain.QueueStats{Visible: 2, Delayed: 1})

	got := e.receiveN("work", 1, time.Minute)
	e.stats("work", domain.QueueStats{Visible: 1, InFlight: 1, Delayed: 1})
	e.advance(30 * time.Second)
	e.stats("work", domain.QueueStats{Visible: 2, InFlight: 1})
	e.advance(30 * time.Second) // the received one's visibility runs out
	e.stats("work", domain.QueueStats{Visible: 3})

	again := e.receiveN("work", 3, time.Minute)
	e.delete("work", append(again, got...)...) // got's receipt is stale by now
	e.stats("work", domain.QueueStats{})
}

func testQueuesIndependent(t *testing.T, e *env) {
	e.sendBodies(domain.QueuePool, "pool job")
	e.sendBodies(domain.QueueLaunch, "launch job")
	e.sendBodies(domain.ResourcePoolQueue("small"), "idle instance")

	e.delete(domain.QueueLaunch, e.only(domain.QueueLaunch, time.Hour, "launch job")...)
	e.only(domain.QueuePool, time.Hour, "pool job")
	e.only(domain.ResourcePoolQueue("small"), time.Hour, "idle instance")
	e.nothing(domain.QueueLaunch)
	e.nothing(domain.ResourcePoolQueue("large"))
}
