package queuetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// pollWait is the long poll of these tests: SQS's longest.
const pollWait = 20 * time.Second

type polled struct {
	msgs []domain.Message
	err  error
}

// poll starts a long poll of queue in its own goroutine and waits until it
// is parked on the clock.
func (e *env) poll(ctx context.Context, queue string) <-chan polled {
	e.t.Helper()
	done := make(chan polled, 1)
	pending := e.clk.Pending()
	go func() {
		msgs, err := e.q.Receive(ctx, queue, 10, time.Minute, pollWait)
		done <- polled{msgs, err}
	}()
	parked := make(chan struct{})
	go func() {
		e.clk.BlockUntil(pending + 1)
		close(parked)
	}()
	select {
	case <-parked:
	case p := <-done:
		e.t.Fatalf("long poll returned before waiting: %q, %v", bodies(p.msgs), p.err)
	case <-time.After(guard):
		e.t.Fatal("long poll never waited on the clock")
	}
	return done
}

// guard bounds, in real time, a wait that a correct queue ends at once, so
// that a broken one fails instead of hanging the suite.
const guard = time.Minute

// notYet fails if the poll has already returned.
func (e *env) notYet(done <-chan polled) {
	e.t.Helper()
	select {
	case p := <-done:
		e.t.Fatalf("long poll returned at %v, before it should: %q, %v", e.clk.Now().Sub(start), bodies(p.msgs), p.err)
	default:
	}
}

// wait waits for the poll to return.
func (e *env) wait(done <-chan polled) polled {
	e.t.Helper()
	select {
	case p := <-done:
		return p
	case <-time.After(guard):
		e.t.Fatalf("long poll still waiting at %v", e.clk.Now().Sub(start))
		return polled{}
	}
}

// got waits for the poll to return and checks the bodies it brought.
func (e *env) got(done <-chan polled, want ...string) []domain.Message {
	e.t.Helper()
	p := e.wait(done)
	if p.err != nil {
		e.t.Fatalf("long poll: %v", p.err)
	}
	if b, w := sorted(bodies(p.msgs)), sorted(want); !slices.Equal(b, w) {
		e.t.Fatalf("long poll at %v: got %q, want %q", e.clk.Now().Sub(start), b, w)
	}
	return p.msgs
}

// The clock never moves here: only the send can end the poll.
func testLongPollSend(t *testing.T, e *env) {
	done := e.poll(e.ctx, "work")
	e.sendBodies("work", "hello")
	got := e.got(done, "hello")
	if got[0].Receives != 1 {
		t.Fatalf("receives %d, want 1", got[0].Receives)
	}
}

func testLongPollTimeout(t *testing.T, e *env) {
	done := e.poll(e.ctx, "work")
	e.advance(pollWait - time.Second)
	e.notYet(done)
	e.advance(time.Second)
	e.got(done)
}

func testLongPollOtherQueue(t *testing.T, e *env) {
	done := e.poll(e.ctx, "work")
	e.sendBodies("elsewhere", "not for you")
	e.notYet(done)
	e.advance(pollWait)
	e.got(done)
	e.only("elsewhere", time.Minute, "not for you")
}

func testLongPollDelay(t *testing.T, e *env) {
	e.send("work", domain.SendRequest{Body: []byte("soon"), Delay: 5 * time.Second})
	done := e.poll(e.ctx, "work")
	e.advance(5 * time.Second)
	e.got(done, "soon")
}

func testLongPollVisibility(t *testing.T, e *env) {
	e.sendBodies("work", "abandoned")
	e.only("work", 5*time.Second, "abandoned")
	done := e.poll(e.ctx, "work")
	e.advance(5 * time.Second)
	if got := e.got(done, "abandoned"); got[0].Receives != 2 {
		t.Fatalf("receives %d, want 2", got[0].Receives)
	}

	// A delayed message sent while the poll waits ends it when it shows.
	done = e.poll(e.ctx, "work")
	e.send("work", domain.SendRequest{Body: []byte("delayed"), Delay: 3 * time.Second})
	e.clk.BlockUntil(1)
	e.advance(3 * time.Second)
	e.got(done, "delayed")
}

func testLongPollCancel(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(e.ctx)
	done := e.poll(ctx, "work")
	cancel()
	if p := e.wait(done); !errors.Is(p.err, context.Canceled) || len(p.msgs) != 0 {
		t.Fatalf("cancelled long poll: %q, %v; want nothing and context.Canceled", bodies(p.msgs), p.err)
	}
}
