package queuetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// tally records which consumer got each message, and every time one was
// handed out while another consumer still held it invisible.
type tally struct {
	mu      sync.Mutex
	by      map[string]int // message id → consumer
	overlap []string
}

func newTally() *tally { return &tally{by: map[string]int{}} }

func (ty *tally) add(consumer int, msgs []domain.Message) {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	for _, m := range msgs {
		if prev, ok := ty.by[m.ID]; ok {
			ty.overlap = append(ty.overlap, fmt.Sprintf("%s (consumers %d and %d)", m.ID, prev, consumer))
		}
		ty.by[m.ID] = consumer
	}
}

func (ty *tally) count() int {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return len(ty.by)
}

// check fails unless every consumer ended without error, none was handed a
// message another held invisible, and between them they got want distinct
// messages.
func (ty *tally) check(t *testing.T, errs []error, want int) {
	t.Helper()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if len(ty.overlap) > 0 {
		t.Fatalf("messages handed out while invisible: %v", ty.overlap)
	}
	if n := ty.count(); n != want {
		t.Fatalf("consumers got %d distinct messages, want %d", n, want)
	}
}

// The clock stands still, so no visibility runs out: however the
// consumers interleave, each message goes to exactly one of them. Half of
// them delete what they get, half keep holding it.
func testConcurrentConsumers(t *testing.T, e *env) {
	const messages, consumers = 300, 12
	var msgs []domain.SendRequest
	for k := range messages {
		msgs = append(msgs, domain.SendRequest{Body: fmt.Appendf(nil, "m%03d", k)})
	}
	e.send("work", msgs...)

	ty := newTally()
	errs := make([]error, consumers)
	var wg sync.WaitGroup
	for c := range consumers {
		wg.Go(func() { errs[c] = consume(e, ty, c, c%2 == 0) })
	}
	wg.Wait()
	ty.check(t, errs, messages)
	e.nothing("work")
}

// consume receives small batches until the queue looks empty.
func consume(e *env, ty *tally, consumer int, deleting bool) error {
	for empty := 0; empty <= emptyReceivesAllowed; {
		got, err := e.q.Receive(e.ctx, "work", 7, time.Hour, 0)
		if err != nil {
			return fmt.Errorf("consumer %d: receive: %w", consumer, err)
		}
		if len(got) == 0 {
			empty++
			continue
		}
		empty = 0
		ty.add(consumer, got)
		if deleting {
			if err := e.q.Delete(e.ctx, "work", receipts(got)); err != nil {
				return fmt.Errorf("consumer %d: delete: %w", consumer, err)
			}
		}
	}
	return nil
}

// Producers send one message at a time while consumers long-poll a queue
// that starts empty, with the clock standing still: only sends wake them,
// and every message reaches exactly one consumer.
func testConcurrentLongPolls(t *testing.T, e *env) {
	const producers, perProducer, consumers = 4, 40, 8
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ty := newTally()
	var consumersDone sync.WaitGroup
	errs := make([]error, consumers)
	for c := range consumers {
		consumersDone.Go(func() {
			for ty.count() < producers*perProducer {
				got, err := e.q.Receive(ctx, "work", 3, time.Hour, pollWait)
				if err != nil {
					if ctx.Err() == nil {
						errs[c] = fmt.Errorf("consumer %d: %w", c, err)
					}
					return
				}
				ty.add(c, got)
			}
			cancel() // wake the others
		})
	}
	var producersDone sync.WaitGroup
	for p := range producers {
		producersDone.Go(func() {
			for k := range perProducer {
				if err := e.q.Send(e.ctx, "work", []domain.SendRequest{{Body: fmt.Appendf(nil, "p%d-%02d", p, k)}}); err != nil {
					t.Errorf("producer %d: %v", p, err)
					return
				}
			}
		})
	}
	producersDone.Wait()
	finished := make(chan struct{})
	go func() { consumersDone.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(guard):
		cancel()
		t.Fatalf("consumers still polling a minute after the last send: %d of %d messages delivered", ty.count(), producers*perProducer)
	}
	ty.check(t, errs, producers*perProducer)
}

// A burst of a thousand jobs goes in with one Send and out with as few
// receives as the implementation needs, then one Delete.
func testBatchOfAThousand(t *testing.T, e *env) {
	const n = 1000
	msgs := make([]domain.SendRequest, n)
	want := make([]string, n)
	for k := range msgs {
		want[k] = fmt.Sprintf("job-%04d", k)
		msgs[k] = domain.SendRequest{Body: []byte(want[k])}
	}
	e.send("burst", msgs...)
	e.stats("burst", domain.QueueStats{Visible: n})

	got := e.only("burst", time.Minute, want...)
	e.stats("burst", domain.QueueStats{InFlight: n})
	e.delete("burst", got...)
	e.stats("burst", domain.QueueStats{})
	e.advance(time.Hour)
	e.nothing("burst")
}
