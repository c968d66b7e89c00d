package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// DefaultDedupWindow is how long a deduplication id suppresses later sends
// with the same id to the same queue: SQS FIFO's five minutes.
const DefaultDedupWindow = 5 * time.Minute

// The limits SQS puts on delays and visibility timeouts. The embedded queue
// enforces them too, so that code which works on it works on SQS.
const (
	MaxDelay      = domain.MaxQueueDelay
	MaxVisibility = domain.MaxVisibility
)

// QueueOptions configures a Queue; zero values take the defaults.
type QueueOptions struct {
	// DedupWindow is how long a SendRequest.DedupID suppresses later sends
	// with the same id to the same queue, counted from the first of them.
	DedupWindow time.Duration
}

// Queue is domain.Queue on the store's database file. Its writes go through
// the store's single writer connection, so they queue behind (and never
// fail against) the store's own transactions. Every Queue of one Store
// shares its long-poll notifications.
type Queue struct {
	s           *Store
	dedupWindow time.Duration
}

var _ domain.Queue = (*Queue)(nil)

// Queue returns the message queues kept in s's database. They are closed
// with s.
func (s *Store) Queue(opts QueueOptions) *Queue {
	if opts.DedupWindow <= 0 {
		opts.DedupWindow = DefaultDedupWindow
	}
	return &Queue{s: s, dedupWindow: opts.DedupWindow}
}

const (
	insertMessage  = `INSERT INTO queue_messages (queue, body, sent_at, visible_at) VALUES (?, ?, ?, ?)`
	purgeDedup     = `DELETE FROM queue_dedup WHERE sent_at <= ?`
	insertDedup    = `INSERT INTO queue_dedup (queue, dedup_id, sent_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`
	deleteMessage  = `DELETE FROM queue_messages WHERE seq = ? AND queue = ? AND receipt = ?`
	changeVisible  = `UPDATE queue_messages SET visible_at = ? WHERE seq = ? AND queue = ? AND receipt = ? AND visible_at > ?`
	selectQueueSum = `SELECT
		coalesce(sum(visible_at <= ?1), 0),
		coalesce(sum(visible_at > ?1 AND receives > 0), 0),
		coalesce(sum(visible_at > ?1 AND receives = 0), 0)
		FROM queue_messages WHERE queue = ?2`
)

// Send enqueues msgs, all or none, and wakes the queue's long polls. A
// message whose DedupID was sent to this queue within the dedup window is
// dropped. Concurrent sends are committed together (see groupSend).
func (q *Queue) Send(ctx context.Context, queue string, msgs []domain.SendRequest) error {
	if err := checkSend(queue, msgs); err != nil {
		return fmt.Errorf("send to queue %s: %w", queue, err)
	}
	if len(msgs) == 0 {
		return q.s.checkOpen()
	}
	if err := q.s.sends.send(ctx, q, queue, msgs); err != nil {
		return fmt.Errorf("send to queue %s: %w", queue, err)
	}
	return nil
}

// groupSend commits concurrent sends in one write transaction (a group
// commit). The first sender to arrive starts a committer, which commits
// every send pending at that moment in one transaction, then the ones that
// arrived meanwhile, until none is left. An idle queue adds no wait; a busy
// one (a webhook burst, each delivery persisted before its 2xx) pays one
// transaction per group instead of one per delivery. A sender waits no
// longer than its context allows, even while the store is locked: the
// webhook must answer GitHub within its deadline.
type groupSend struct {
	mu         sync.Mutex
	pending    []*pendingSend
	committing bool
}

type pendingSend struct {
	q     *Queue
	queue string
	msgs  []domain.SendRequest
	err   error
	done  chan struct{} // closed when committed (or failed)
}

func (g *groupSend) send(ctx context.Context, q *Queue, queue string, msgs []domain.SendRequest) error {
	p := &pendingSend{q: q, queue: queue, msgs: msgs, done: make(chan struct{})}
	g.mu.Lock()
	g.pending = append(g.pending, p)
	start := !g.committing
	g.committing = true
	g.mu.Unlock()
	if start {
		go g.commitAll()
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		select {
		case <-p.done: // committed as the context ended: say so
			return p.err
		default:
		}
		// Like any write whose answer was not waited for: it may still
		// land, which the queues' consumers allow for (delivery is at
		// least once).
		return fmt.Errorf("%w; the messages may still be written", ctx.Err())
	}
}

// commitAll commits the pending sends, group after group, until none is
// left.
func (g *groupSend) commitAll() {
	for {
		g.mu.Lock()
		group := g.pending
		g.pending = nil
		if len(group) == 0 {
			g.committing = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		g.commit(group)
	}
}

// commit writes group's sends in one transaction. It does not end with a
// sender's context: the others depend on it.
func (g *groupSend) commit(group []*pendingSend) {
	s := group[0].q.s
	ctx := context.Background()
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		now := s.clk.Now()
		for _, p := range group {
			if err := p.q.insert(ctx, tx, p.queue, p.msgs, now); err != nil {
				return err
			}
		}
		return nil
	})
	notified := map[string]bool{}
	for _, p := range group {
		p.err = err
		if err == nil && !notified[p.queue] {
			notified[p.queue] = true
			s.waiters.notify(p.queue)
		}
		close(p.done)
	}
}

// insert adds msgs to queue inside tx, dropping deduplicated ones.
func (q *Queue) insert(ctx context.Context, tx *sql.Tx, queue string, msgs []domain.SendRequest, now time.Time) error {
	keep, err := q.dedup(ctx, tx, queue, msgs, now)
	if err != nil {
		return err
	}
	stmt, err := q.s.txStmt(ctx, tx, insertMessage)
	if err != nil {
		return err
	}
	for k, m := range msgs {
		if !keep[k] {
			continue
		}
		body := m.Body
		if body == nil {
			body = []byte{}
		}
		if _, err := stmt.ExecContext(ctx, queue, body, now.UnixNano(), now.Add(m.Delay).UnixNano()); err != nil {
			return fmt.Errorf("insert message %d: %w", k, err)
		}
	}
	return nil
}

func checkSend(queue string, msgs []domain.SendRequest) error {
	if queue == "" {
		return errors.New("no queue name")
	}
	for k, m := range msgs {
		if m.Delay < 0 || m.Delay > MaxDelay {
			return fmt.Errorf("message %d: delay %v outside 0..%v", k, m.Delay, MaxDelay)
		}
		if len(m.Body) > domain.MaxMessageBody {
			return fmt.Errorf("message %d: body of %d bytes is over %d, the most SQS takes", k, len(m.Body), domain.MaxMessageBody)
		}
	}
	return nil
}

// dedup reports which of msgs to keep: those without a DedupID, and the
// first with each DedupID not seen within the window, which it records.
func (q *Queue) dedup(ctx context.Context, tx *sql.Tx, queue string, msgs []domain.SendRequest, now time.Time) ([]bool, error) {
	keep := make([]bool, len(msgs))
	var stmt *sql.Stmt
	for k, m := range msgs {
		if m.DedupID == "" {
			keep[k] = true
			continue
		}
		if stmt == nil {
			// Purging first leaves only records within the window, so an
			// insert that finds its key taken is a duplicate.
			purge, err := q.s.txStmt(ctx, tx, purgeDedup)
			if err != nil {
				return nil, err
			}
			if _, err := purge.ExecContext(ctx, now.Add(-q.dedupWindow).UnixNano()); err != nil {
				return nil, fmt.Errorf("purge dedup ids: %w", err)
			}
			if stmt, err = q.s.txStmt(ctx, tx, insertDedup); err != nil {
				return nil, err
			}
		}
		res, err := stmt.ExecContext(ctx, queue, m.DedupID, now.UnixNano())
		if err != nil {
			return nil, fmt.Errorf("record dedup id of message %d: %w", k, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, fmt.Errorf("record dedup id of message %d: %w", k, err)
		}
		keep[k] = n == 1
	}
	return keep, nil
}

// Delete removes the messages whose receipts are current, in one
// transaction; other receipts are ignored.
func (q *Queue) Delete(ctx context.Context, queue string, receipts []string) error {
	if len(receipts) == 0 {
		return q.s.checkOpen()
	}
	err := q.s.inWriteTx(ctx, func(tx *sql.Tx) error {
		stmt, err := q.s.txStmt(ctx, tx, deleteMessage)
		if err != nil {
			return err
		}
		for _, r := range receipts {
			seq, token, ok := parseReceipt(r)
			if !ok {
				continue
			}
			if _, err := stmt.ExecContext(ctx, seq, queue, token); err != nil {
				return fmt.Errorf("delete message %d: %w", seq, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete from queue %s: %w", queue, err)
	}
	return nil
}

// ChangeVisibility makes the message received with receipt visible again
// after d. Like SQS, it needs the message still in flight under this
// receipt: once the visibility has run out (or was set to 0) the receipt
// can no longer change it, and ErrStaleReceipt says so.
func (q *Queue) ChangeVisibility(ctx context.Context, queue, receipt string, d time.Duration) error {
	if d < 0 || d > MaxVisibility {
		return fmt.Errorf("change visibility in queue %s: %v outside 0..%v", queue, d, MaxVisibility)
	}
	seq, token, ok := parseReceipt(receipt)
	if !ok {
		return fmt.Errorf("change visibility in queue %s: %w", queue, domain.ErrStaleReceipt)
	}
	var changed bool
	err := q.s.inWriteTx(ctx, func(tx *sql.Tx) error {
		now := q.s.clk.Now()
		stmt, err := q.s.txStmt(ctx, tx, changeVisible)
		if err != nil {
			return err
		}
		res, err := stmt.ExecContext(ctx, now.Add(d).UnixNano(), seq, queue, token, now.UnixNano())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		changed = n == 1
		return err
	})
	if err != nil {
		return fmt.Errorf("change visibility in queue %s: %w", queue, err)
	}
	if !changed {
		return fmt.Errorf("change visibility in queue %s: message %d: %w", queue, seq, domain.ErrStaleReceipt)
	}
	// A long poll may be sleeping until the old, later visibility.
	q.s.waiters.notify(queue)
	return nil
}

// Stats counts the queue's messages at the clock's now.
func (q *Queue) Stats(ctx context.Context, queue string) (domain.QueueStats, error) {
	if err := q.s.checkOpen(); err != nil {
		return domain.QueueStats{}, fmt.Errorf("stats of queue %s: %w", queue, err)
	}
	var st domain.QueueStats
	row := q.s.readRow(ctx, selectQueueSum, q.s.clk.Now().UnixNano(), queue)
	if err := row.Scan(&st.Visible, &st.InFlight, &st.Delayed); err != nil {
		return domain.QueueStats{}, fmt.Errorf("stats of queue %s: %w", queue, err)
	}
	return st, nil
}

// A receipt is "<seq>.<token>": the message's row and the random token of
// the receive that handed it out. A later receive replaces the token, which
// is what makes earlier receipts stale.
func formatReceipt(seq int64, token string) string {
	return strconv.FormatInt(seq, 10) + "." + token
}

func parseReceipt(r string) (seq int64, token string, ok bool) {
	s, token, found := strings.Cut(r, ".")
	if !found || token == "" {
		return 0, "", false
	}
	seq, err := strconv.ParseInt(s, 10, 64)
	return seq, token, err == nil && seq > 0
}
