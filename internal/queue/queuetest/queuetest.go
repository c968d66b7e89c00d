// Package queuetest is the contract every domain.Queue implementation must
// meet: the embedded SQLite queue and SQS run the same suite, so the
// dispatcher and the provisioner behave the same on both.
//
// The suite asks for no more than SQS guarantees: at-least-once delivery,
// visibility timeouts, per-message delays of at most 15 minutes,
// deduplication within a five-minute window, receipts that go stale once a
// message is received again. It never relies on the order of messages, nor
// on a short receive (wait 0) returning everything available: it receives
// in a loop until it has what it expects. It does rely on Receive honouring
// max above 10 (an implementation on SQS loops), on exact Stats in the
// tests about them and about a batch of a thousand, and on the clock it
// hands to open: time passes only when the suite advances it, and a long
// poll waits on that clock's timers. A queue that keeps its own time but
// can be told what time it is (SQS in an emulator) follows that clock
// through Options.SetTime, which the suite calls whenever it moves it, and
// takes every contract. One that cannot (SQS itself) runs with
// Options.RealTime: the contracts that never move the clock, unchanged,
// and none of the others.
package queuetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Opener returns a new, empty queue whose time comes from clk (or follows
// it, with Options.SetTime). It registers its own cleanup.
type Opener func(t *testing.T, clk *clock.Virtual) domain.Queue

// start is where every subtest's clock begins.
var start = time.Date(2025, 6, 2, 9, 30, 0, 0, time.UTC)

type contract struct {
	name string
	run  func(t *testing.T, e *env)
	// clock: what the contract asserts depends on time it moves on the
	// clock, or on a long poll parking on it, so it cannot hold on a queue
	// that keeps its own time and cannot be told it (Options.RealTime). A
	// contract that moves the clock only to show that nothing turns up
	// later still holds there, sooner.
	clock bool
}

const (
	needsClock = true
	realTimeOK = false
)

// Options adapt the suite to an implementation that cannot take all of it
// as is. The zero value runs every contract on the queue "work".
type Options struct {
	// RealTime: the queue keeps its own time (SQS) instead of the clock
	// open is given, and cannot be told what time it is. The contracts
	// that need to move time are skipped; the others run unchanged.
	// SetTime, where set, overrides it.
	RealTime bool
	// SetTime: the queue keeps its own time but can be told what time it
	// is (SQS in an emulator). The suite calls SetTime with each queue
	// open returns and its clock's time, once opened and each time the
	// suite moves the clock; SetTime returns once the queue's time is now,
	// and a long poll already waiting must notice it. Every contract runs.
	// A long poll still shows it waits by a timer on the clock open was
	// given, pending while it waits: the suite moves the clock once it
	// sees that timer.
	SetTime func(t *testing.T, q domain.Queue, now time.Time)
	// Name names the implementation in skip messages.
	Name string
	// DedupQueue is the queue the deduplication contracts send to, one
	// that honours dedup ids (on SQS, a FIFO queue). Default "work".
	DedupQueue string
	// Skip skips the named contracts, each with its reason: for gaps in an
	// emulator an implementation is tested on, never in the
	// implementation itself. A name that is no contract fails the suite.
	Skip map[string]string
}

func (o Options) dedupQueue() string {
	if o.DedupQueue == "" {
		return "work"
	}
	return o.DedupQueue
}

// Queues lists every queue name the suite uses, for an implementation
// whose queues must exist before they are used.
func (o Options) Queues() []string {
	names := []string{"work", "other", "elsewhere", "burst", "never-used",
		domain.QueuePool, domain.QueueLaunch, domain.ResourcePoolQueue("small"), domain.ResourcePoolQueue("large")}
	if d := o.dedupQueue(); !slices.Contains(names, d) {
		names = append(names, d)
	}
	return names
}

// contracts lists the whole suite in one place, in the order it runs.
func contracts() []contract {
	return []contract{
		// Sending, receiving, deleting.
		{"SendReceiveDelete", testSendReceiveDelete, needsClock},
		{"SendIsAllOrNone", testSendAllOrNone, realTimeOK},
		{"SendNothingIsNoOp", testSendNothing, realTimeOK},
		{"DelayHidesUntilDue", testDelay, needsClock},
		{"DedupWithinWindowDrops", testDedupWithinWindow, realTimeOK},
		{"DedupAfterWindowAccepts", testDedupAfterWindow, needsClock},
		{"StatsCountVisibleInFlightDelayed", testStats, needsClock},
		{"QueuesAreIndependent", testQueuesIndependent, realTimeOK},
		// Visibility timeouts.
		{"VisibilityExpiryRedelivers", testVisibilityExpiry, needsClock},
		{"ChangeVisibilityToZeroRequeues", testChangeVisibilityZero, realTimeOK},
		{"ChangeVisibilityExtends", testChangeVisibilityExtends, needsClock},
		{"ChangeVisibilityShortens", testChangeVisibilityShortens, needsClock},
		{"DeletedMessageReceiptIsStale", testDeletedReceiptStale, realTimeOK},
		// Long polls.
		{"LongPollReturnsEarlyOnSend", testLongPollSend, needsClock},
		{"LongPollReturnsEmptyAfterWait", testLongPollTimeout, needsClock},
		{"LongPollIgnoresOtherQueues", testLongPollOtherQueue, needsClock},
		{"LongPollWakesWhenDelayEnds", testLongPollDelay, needsClock},
		{"LongPollWakesWhenVisibilityEnds", testLongPollVisibility, needsClock},
		{"LongPollEndsWithContext", testLongPollCancel, needsClock},
		// Consumers racing each other.
		{"ConcurrentConsumersNeverOverlap", testConcurrentConsumers, realTimeOK},
		{"ConcurrentLongPollsShareTheSends", testConcurrentLongPolls, realTimeOK},
		{"BatchOfAThousand", testBatchOfAThousand, realTimeOK},
	}
}

// Run runs the whole contract suite against the queues open returns.
func Run(t *testing.T, open Opener) { RunWith(t, open, Options{}) }

// RunWith runs the contract suite as opts adapt it.
func RunWith(t *testing.T, open Opener, opts Options) {
	all := contracts()
	for name := range opts.Skip {
		if !slices.ContainsFunc(all, func(c contract) bool { return c.name == name }) {
			t.Fatalf("queuetest: Options.Skip names %q, which is no contract", name)
		}
	}
	impl := opts.Name
	if impl == "" {
		impl = "the implementation"
	}
	for _, c := range all {
		t.Run(c.name, func(t *testing.T) {
			if c.clock && opts.RealTime && opts.SetTime == nil {
				t.Skipf("needs a clock the suite can move; %s runs in real time", impl)
			}
			if why, ok := opts.Skip[c.name]; ok {
				t.Skip(why)
			}
			clk := clock.NewVirtual(start)
			e := &env{t: t, q: open(t, clk), clk: clk, ctx: t.Context(), dedup: opts.dedupQueue(), setTime: opts.SetTime}
			e.follow()
			c.run(t, e)
		})
	}
}

// env is one subtest's queue, clock and context, with helpers that fail the
// test on unexpected errors.
type env struct {
	t   *testing.T
	q   domain.Queue
	clk *clock.Virtual
	ctx context.Context
	// dedup is the queue of the deduplication contracts.
	dedup string
	// setTime is Options.SetTime.
	setTime func(t *testing.T, q domain.Queue, now time.Time)
}

// advance moves the clock by d, and the queue's own time with it.
func (e *env) advance(d time.Duration) {
	e.t.Helper()
	e.clk.Advance(d)
	e.follow()
}

// advanceTo moves the clock to t, and the queue's own time with it.
func (e *env) advanceTo(t time.Time) {
	e.t.Helper()
	e.clk.AdvanceTo(t)
	e.follow()
}

// follow tells a queue that keeps its own time what time the clock says.
func (e *env) follow() {
	e.t.Helper()
	if e.setTime != nil {
		e.setTime(e.t, e.q, e.clk.Now())
	}
}

// emptyReceivesAllowed is how many short receives in a row may come back
// empty while messages are expected: SQS's short poll samples a subset of
// its servers and may miss messages that are there.
const emptyReceivesAllowed = 5

func (e *env) send(queue string, msgs ...domain.SendRequest) {
	e.t.Helper()
	if err := e.q.Send(e.ctx, queue, msgs); err != nil {
		e.t.Fatalf("send %d to %s: %v", len(msgs), queue, err)
	}
}

// sendBodies sends one plain message per body.
func (e *env) sendBodies(queue string, bodies ...string) {
	e.t.Helper()
	msgs := make([]domain.SendRequest, len(bodies))
	for k, b := range bodies {
		msgs[k] = domain.SendRequest{Body: []byte(b)}
	}
	e.send(queue, msgs...)
}

func (e *env) receive(queue string, max int, visibility time.Duration) []domain.Message {
	e.t.Helper()
	msgs, err := e.q.Receive(e.ctx, queue, max, visibility, 0)
	if err != nil {
		e.t.Fatalf("receive from %s: %v", queue, err)
	}
	if len(msgs) > max {
		e.t.Fatalf("receive from %s: %d messages, max %d", queue, len(msgs), max)
	}
	return msgs
}

// receiveN receives until it holds n messages, each received once.
func (e *env) receiveN(queue string, n int, visibility time.Duration) []domain.Message {
	e.t.Helper()
	var out []domain.Message
	for empty := 0; len(out) < n; {
		got := e.receive(queue, n-len(out), visibility)
		if len(got) == 0 {
			if empty++; empty > emptyReceivesAllowed {
				e.t.Fatalf("receive from %s: got %d of %d messages (%q), then nothing", queue, len(out), n, bodies(out))
			}
		}
		out = append(out, got...)
	}
	if dup := duplicateID(out); dup != "" {
		e.t.Fatalf("receive from %s: message %s handed out twice while invisible", queue, dup)
	}
	return out
}

// nothing fails unless queue has no visible message.
func (e *env) nothing(queue string) {
	e.t.Helper()
	if got := e.receive(queue, 10, time.Minute); len(got) != 0 {
		e.t.Fatalf("receive from %s at %v: got %q, want nothing", queue, e.clk.Now().Sub(start), bodies(got))
	}
}

// only receives everything visible in queue and fails unless the bodies
// are want, in any order. The messages stay invisible for visibility.
func (e *env) only(queue string, visibility time.Duration, want ...string) []domain.Message {
	e.t.Helper()
	got := e.receiveN(queue, len(want), visibility)
	e.nothing(queue)
	if b, w := sorted(bodies(got)), sorted(want); !slices.Equal(b, w) {
		e.t.Fatalf("receive from %s: got %q, want %q", queue, b, w)
	}
	return got
}

func (e *env) delete(queue string, msgs ...domain.Message) {
	e.t.Helper()
	if err := e.q.Delete(e.ctx, queue, receipts(msgs)); err != nil {
		e.t.Fatalf("delete %d from %s: %v", len(msgs), queue, err)
	}
}

func (e *env) changeVisibility(queue, receipt string, d time.Duration) {
	e.t.Helper()
	if err := e.q.ChangeVisibility(e.ctx, queue, receipt, d); err != nil {
		e.t.Fatalf("change visibility in %s to %v: %v", queue, d, err)
	}
}

// stale fails unless ChangeVisibility refuses receipt as stale.
func (e *env) stale(queue, receipt string) {
	e.t.Helper()
	err := e.q.ChangeVisibility(e.ctx, queue, receipt, time.Minute)
	if !errors.Is(err, domain.ErrStaleReceipt) {
		e.t.Fatalf("change visibility with a stale receipt: got %v, want ErrStaleReceipt", err)
	}
}

func (e *env) stats(queue string, want domain.QueueStats) {
	e.t.Helper()
	got, err := e.q.Stats(e.ctx, queue)
	if err != nil {
		e.t.Fatalf("stats of %s: %v", queue, err)
	}
	if got != want {
		e.t.Fatalf("stats of %s at %v: got %+v, want %+v", queue, e.clk.Now().Sub(start), got, want)
	}
}

func bodies(msgs []domain.Message) []string {
	out := make([]string, len(msgs))
	for k, m := range msgs {
		out[k] = string(m.Body)
	}
	return out
}

func receipts(msgs []domain.Message) []string {
	out := make([]string, len(msgs))
	for k, m := range msgs {
		out[k] = m.Receipt
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// duplicateID returns the id of a message that appears twice in msgs.
func duplicateID(msgs []domain.Message) string {
	seen := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		if seen[m.ID] {
			return m.ID
		}
		seen[m.ID] = true
	}
	return ""
}
