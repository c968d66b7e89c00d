package sqlite

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/queue/queuetest"
)

func TestQueueContract(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, clk *clock.Virtual) domain.Queue {
		return openAt(t, tempPath(t), clk).Queue(QueueOptions{})
	})
}

// A scratch store (a simulation's) remembers which queues a peek found
// idle, and must still keep every promise of the port.
func TestScratchQueueContract(t *testing.T) {
	queuetest.Run(t, func(t *testing.T, clk *clock.Virtual) domain.Queue {
		s, err := OpenScratch(t.Context(), tempPath(t), clk)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s.Queue(QueueOptions{})
	})
}

// queueEnv is a queue on a fresh store, for the checks beyond the contract.
type queueEnv struct {
	t   *testing.T
	s   *Store
	q   *Queue
	clk *clock.Virtual
}

func newQueueEnv(t *testing.T, opts QueueOptions) *queueEnv {
	clk := clock.NewVirtual(epoch)
	s := openAt(t, tempPath(t), clk)
	return &queueEnv{t: t, s: s, q: s.Queue(opts), clk: clk}
}

func (e *queueEnv) send(queue string, msgs ...domain.SendRequest) {
	e.t.Helper()
	if err := e.q.Send(e.t.Context(), queue, msgs); err != nil {
		e.t.Fatalf("send: %v", err)
	}
}

func (e *queueEnv) receive(queue string, max int, vis time.Duration) []domain.Message {
	e.t.Helper()
	msgs, err := e.q.Receive(e.t.Context(), queue, max, vis, 0)
	if err != nil {
		e.t.Fatalf("receive: %v", err)
	}
	return msgs
}

// deleteLast deletes the last message of queue by its receipt and checks
// that nothing is left.
func (e *queueEnv) deleteLast(queue, receipt string) {
	e.t.Helper()
	if err := e.q.Delete(e.t.Context(), queue, []string{receipt}); err != nil {
		e.t.Fatalf("delete: %v", err)
	}
	if st, err := e.q.Stats(e.t.Context(), queue); err != nil || st != (domain.QueueStats{}) {
		e.t.Fatalf("after delete: %+v, %v", st, err)
	}
}

func body(s string) domain.SendRequest { return domain.SendRequest{Body: []byte(s)} }

func bodiesOf(msgs []domain.Message) []string {
	out := make([]string, len(msgs))
	for k, m := range msgs {
		out[k] = string(m.Body)
	}
	return out
}

// The embedded queue is stricter than the contract: oldest visible first,
// by visible_at and then by send order, and exactly max when it has them.
func TestQueueReceivesOldestFirst(t *testing.T) {
	e := newQueueEnv(t, QueueOptions{})
	e.send("q", body("a"), domain.SendRequest{Body: []byte("delayed"), Delay: 2 * time.Second}, body("b"))
	e.clk.Advance(time.Second)
	e.send("q", body("c"))
	held := e.receive("q", 1, 10*time.Second) // a, back at +11s
	e.clk.Advance(2 * time.Second)
	// visible_at: b +0, c +1s, delayed +2s; a comes back at +11s.
	if got := bodiesOf(e.receive("q", 2, time.Minute)); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("got %v, want [b c]", got)
	}
	e.clk.Advance(10 * time.Second)
	if got := bodiesOf(e.receive("q", 10, time.Minute)); !slices.Equal(got, []string{"delayed", "a"}) {
		t.Fatalf("got %v, want [delayed a]", got)
	}
	if bodiesOf(held)[0] != "a" {
		t.Fatalf("first receive got %v, want a", bodiesOf(held))
	}
}

func TestQueueStaleAndForeignReceiptsDeleteNothing(t *testing.T) {
	e := newQueueEnv(t, QueueOptions{})
	e.send("q", body("x"))
	e.send("other", body("y"))
	first := e.receive("q", 1, time.Second)[0]
	e.clk.Advance(time.Second)
	second := e.receive("q", 1, time.Second)[0]
	foreign := e.receive("other", 1, time.Minute)[0]

	garbage := []string{first.Receipt, foreign.Receipt, "", "nonsense", "12", "x.y", "-1.abc", first.Receipt + "0"}
	if err := e.q.Delete(t.Context(), "q", garbage); err != nil {
		t.Fatalf("delete: %v", err)
	}
	for _, r := range garbage {
		if err := e.q.ChangeVisibility(t.Context(), "q", r, 0); !errors.Is(err, domain.ErrStaleReceipt) {
			t.Fatalf("change visibility with %q: got %v, want ErrStaleReceipt", r, err)
		}
	}
	st, _ := e.q.Stats(t.Context(), "q")
	if st.InFlight != 1 {
		t.Fatalf("after deleting with stale receipts: %+v, want the message in flight", st)
	}
	if st, _ := e.q.Stats(t.Context(), "other"); st.InFlight != 1 {
		t.Fatalf("other queue: %+v, want its message in flight", st)
	}
	e.deleteLast("q", second.Receipt)
}

// As on SQS, a receipt changes visibility only while its message is in
// flight: once the visibility ran out it is too late to extend it.
func TestQueueChangeVisibilityNeedsMessageInFlight(t *testing.T) {
	e := newQueueEnv(t, QueueOptions{})
	e.send("q", body("x"))
	m := e.receive("q", 1, 10*time.Second)[0]
	e.clk.Advance(10 * time.Second)
	if err := e.q.ChangeVisibility(t.Context(), "q", m.Receipt, time.Minute); !errors.Is(err, domain.ErrStaleReceipt) {
		t.Fatalf("got %v, want ErrStaleReceipt", err)
	}
	// Not received again, the receipt still deletes (the port's rule).
	e.deleteLast("q", m.Receipt)
}

func TestQueueRefusesWhatSQSWouldRefuse(t *testing.T) {
	e := newQueueEnv(t, QueueOptions{})
	ctx := t.Context()
	cases := []struct {
		name string
		call func() error
	}{
		{"send without a queue name", func() error { return e.q.Send(ctx, "", []domain.SendRequest{body("x")}) }},
		{"delay over 15 minutes", func() error {
			return e.q.Send(ctx, "q", []domain.SendRequest{{Body: []byte("x"), Delay: MaxDelay + time.Second}})
		}},
		{"receive without a queue name", func() error { _, err := e.q.Receive(ctx, "", 1, time.Second, 0); return err }},
		{"receive of none", func() error { _, err := e.q.Receive(ctx, "q", 0, time.Second, 0); return err }},
		{"negative visibility", func() error { _, err := e.q.Receive(ctx, "q", 1, -time.Second, 0); return err }},
		{"visibility over 12 hours", func() error { _, err := e.q.Receive(ctx, "q", 1, MaxVisibility+time.Second, 0); return err }},
		{"negative wait", func() error { _, err := e.q.Receive(ctx, "q", 1, time.Second, -time.Second); return err }},
		{"visibility change over 12 hours", func() error { return e.q.ChangeVisibility(ctx, "q", "1.ab", MaxVisibility+time.Second) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); err == nil || errors.Is(err, domain.ErrStaleReceipt) {
				t.Fatalf("got %v, want a refusal", err)
			}
		})
	}
	if st, _ := e.q.Stats(ctx, "q"); st != (domain.QueueStats{}) {
		t.Fatalf("refused calls left %+v", st)
	}
}

func TestQueueDedupWindowOptionAndPurge(t *testing.T) {
	e := newQueueEnv(t, QueueOptions{DedupWindow: time.Minute})
	e.send("q", domain.SendRequest{Body: []byte("a"), DedupID: "d"}, domain.SendRequest{Body: []byte("b"), DedupID: "e"})
	e.clk.Advance(59 * time.Second)
	e.send("q", domain.SendRequest{Body: []byte("dropped"), DedupID: "d"})
	e.clk.Advance(time.Second)
	e.send("q", domain.SendRequest{Body: []byte("c"), DedupID: "d"})
	if got := bodiesOf(e.receive("q", 10, time.Minute)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("got %v, want [a b c]", got)
	}
	// The record of "e" is a minute old: the last send purged it.
	var ids []string
	rows, err := e.s.readers.QueryContext(t.Context(), `SELECT dedup_id FROM queue_dedup ORDER BY dedup_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if !slices.Equal(ids, []string{"d"}) {
		t.Fatalf("dedup records %v, want [d]", ids)
	}
}

// Every Queue of a store shares its writer and its notifications: a send
// through one wakes a long poll on another.
func TestQueueViewsShareOneStore(t *testing.T) {
	e := newQueueEnv(t, QueueOptions{})
	other := e.s.Queue(QueueOptions{})
	done := make(chan []domain.Message, 1)
	go func() {
		msgs, err := e.q.Receive(context.Background(), "q", 1, time.Minute, time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- msgs
	}()
	e.clk.BlockUntil(1)
	if err := other.Send(t.Context(), "q", []domain.SendRequest{body("hi")}); err != nil {
		t.Fatal(err)
	}
	select {
	case msgs := <-done:
		if got := bodiesOf(msgs); !slices.Equal(got, []string{"hi"}) {
			t.Fatalf("got %v", got)
		}
	case <-time.After(time.Minute): // a guard: the send wakes the poll at once
		t.Fatal("the send did not wake the long poll")
	}
	// The poll stopped its timer on the way out.
	if n := e.clk.Pending(); n != 0 {
		t.Fatalf("%d timers left pending", n)
	}
}

func TestQueueCloseEndsLongPoll(t *testing.T) {
	e := newQueueEnv(t, QueueOptions{})
	done := make(chan error, 1)
	go func() {
		_, err := e.q.Receive(context.Background(), "q", 1, time.Minute, time.Minute)
		done <- err
	}()
	e.clk.BlockUntil(1)
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	for name, call := range map[string]func() error{
		"Send":   func() error { return e.q.Send(t.Context(), "q", []domain.SendRequest{body("x")}) },
		"Delete": func() error { return e.q.Delete(t.Context(), "q", []string{"1.ab"}) },
		"Stats":  func() error { _, err := e.q.Stats(t.Context(), "q"); return err },
		"ChangeVisibility": func() error {
			return e.q.ChangeVisibility(t.Context(), "q", "1.ab", 0)
		},
	} {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after close: got %v, want ErrClosed", name, err)
		}
	}
}

func TestQueueSurvivesReopen(t *testing.T) {
	path, clk := tempPath(t), clock.NewVirtual(epoch)
	s := openAt(t, path, clk)
	q := s.Queue(QueueOptions{})
	if err := q.Send(t.Context(), "q", []domain.SendRequest{body("a"), {Body: []byte("b"), DedupID: "d"}}); err != nil {
		t.Fatal(err)
	}
	held, err := q.Receive(t.Context(), "q", 1, time.Minute, 0)
	if err != nil || len(held) != 1 {
		t.Fatalf("receive: %v %v", held, err)
	}
	s.Close()

	q = openAt(t, path, clk).Queue(QueueOptions{})
	if err := q.Send(t.Context(), "q", []domain.SendRequest{{Body: []byte("dup"), DedupID: "d"}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := q.Stats(t.Context(), "q"); st != (domain.QueueStats{Visible: 1, InFlight: 1}) {
		t.Fatalf("after reopen: %+v", st)
	}
	if err := q.Delete(t.Context(), "q", []string{held[0].Receipt}); err != nil {
		t.Fatal(err)
	}
	if st, _ := q.Stats(t.Context(), "q"); st != (domain.QueueStats{Visible: 1}) {
		t.Fatalf("after deleting with the receipt from before the reopen: %+v", st)
	}
}

func TestQueueErrorsDoNotQuoteBodies(t *testing.T) {
	e := newQueueEnv(t, QueueOptions{})
	secret := "body-SECRET"
	err := e.q.Send(t.Context(), "q", []domain.SendRequest{{Body: []byte(secret), Delay: -1}})
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("got %v", err)
	}
}
