package looptest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/loop"
)

// CheckIdlePolls checks that a loop without a long poll (tests, the
// simulator) does not spin on an empty queue: it receives from queue once,
// then waits on clk, and receives again once idle has passed. newLoop
// builds the loop on its queue as wrap returns it, so that the receives
// can be counted.
func CheckIdlePolls(t *testing.T, clk *clock.Virtual, queue string, idle time.Duration,
	newLoop func(wrap func(domain.Queue) domain.Queue) loop.Loop) {
	t.Helper()
	var n atomic.Int64
	l := newLoop(func(q domain.Queue) domain.Queue { return receiveCounter{Queue: q, name: queue, n: &n} })
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan error)
	go func() { stopped <- Run(ctx, clk, l) }()
	waitForTimer := func() {
		t.Helper()
		parked := make(chan struct{})
		go func() { clk.BlockUntil(1); close(parked) }()
		select {
		case <-parked:
		case <-time.After(10 * time.Second): // a watchdog: a loop spinning never parks
			t.Fatalf("the loop never waited on its clock (%d receives)", n.Load())
		}
	}
	waitForTimer()
	if got := n.Load(); got != 1 {
		t.Fatalf("%d receives before the clock moved, want 1", got)
	}
	clk.Advance(idle)
	waitForTimer()
	if got := n.Load(); got != 2 {
		t.Fatalf("%d receives after one idle poll, want 2", got)
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// receiveCounter counts the receives from one queue.
type receiveCounter struct {
	domain.Queue
	name string
	n    *atomic.Int64
}

func (q receiveCounter) Receive(ctx context.Context, name string, max int, vis, wait time.Duration) ([]domain.Message, error) {
	if name == q.name {
		q.n.Add(1)
	}
	return q.Queue.Receive(ctx, name, max, vis, wait)
}
