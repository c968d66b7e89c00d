package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

const (
	// selectVisible walks the (queue, visible_at, seq) index: oldest first.
	selectVisible = `SELECT seq, body, sent_at, receives FROM queue_messages
		WHERE queue = ? AND visible_at <= ? ORDER BY visible_at, seq LIMIT ?`
	markReceived = `UPDATE queue_messages SET visible_at = ?, receives = receives + 1, receipt = ? WHERE seq = ?`
	// selectFirstVisible is when the queue's first message shows (or showed).
	selectFirstVisible = `SELECT min(visible_at) FROM queue_messages WHERE queue = ?`
	// selectNextVisible is when the queue's next invisible message shows.
	selectNextVisible = `SELECT min(visible_at) FROM queue_messages WHERE queue = ? AND visible_at > ?`
)

// tokenBytes is the size of a receipt's random part: enough that two
// receives never share one.
const tokenBytes = 12

// Receive returns up to max messages visible at the clock's now, oldest
// first, and hides them for visibility. With none visible it long-polls for
// up to wait: it looks again when a Send or ChangeVisibility in this process
// touches the queue, or when the clock reaches the moment the queue's next
// delayed or in-flight message becomes visible, whichever comes first.
func (q *Queue) Receive(ctx context.Context, queue string, max int, visibility, wait time.Duration) ([]domain.Message, error) {
	if err := checkReceive(queue, max, visibility, wait); err != nil {
		return nil, fmt.Errorf("receive from queue %s: %w", queue, err)
	}
	deadline := q.s.clk.Now().Add(wait)
	for {
		var changed <-chan struct{}
		if wait > 0 {
			changed = q.s.waiters.watch(queue)
		}
		msgs, next, err := q.receiveOnce(ctx, queue, max, visibility)
		if err != nil {
			return nil, fmt.Errorf("receive from queue %s: %w", queue, err)
		}
		now := q.s.clk.Now()
		if len(msgs) > 0 || !now.Before(deadline) {
			return msgs, nil
		}
		wake := deadline
		if !next.IsZero() && next.Before(wake) {
			wake = next
		}
		if err := q.sleep(ctx, changed, wake.Sub(now)); err != nil {
			return nil, fmt.Errorf("receive from queue %s: %w", queue, err)
		}
	}
}

func checkReceive(queue string, max int, visibility, wait time.Duration) error {
	switch {
	case queue == "":
		return errors.New("no queue name")
	case max < 1:
		return fmt.Errorf("max %d: must be at least 1", max)
	case visibility < 0 || visibility > MaxVisibility:
		return fmt.Errorf("visibility %v outside 0..%v", visibility, MaxVisibility)
	case wait < 0:
		return fmt.Errorf("negative wait %v", wait)
	}
	return nil
}

// sleep waits for d on the store's clock, a change to the queue, or the end
// of ctx. The timer is stopped on the way out, so an early wake leaves no
// pending timer behind (a virtual clock's tests count them).
func (q *Queue) sleep(ctx context.Context, changed <-chan struct{}, d time.Duration) error {
	elapsed, stop := clock.Closes(q.s.clk, d)
	defer stop()
	select {
	case <-changed:
	case <-elapsed:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// receiveOnce takes up to max visible messages in one write transaction.
// When there are none, next is when the queue's earliest hidden message
// becomes visible (zero if it has none).
func (q *Queue) receiveOnce(ctx context.Context, queue string, max int, visibility time.Duration) (msgs []domain.Message, next time.Time, err error) {
	if next, ready, err := q.peek(ctx, queue); err != nil || !ready {
		return nil, next, err
	}
	err = q.s.inWriteTx(ctx, func(tx *sql.Tx) error {
		now := q.s.clk.Now().UnixNano()
		var seqs []int64
		msgs, seqs, err = q.selectMessages(ctx, tx, queue, now, max)
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			next, err = q.nextVisible(ctx, tx, queue, now)
			return err
		}
		return q.markMessages(ctx, tx, msgs, seqs, now+int64(visibility))
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	return msgs, next, nil
}

// peek reports, from a read-only connection, whether the queue may have a
// visible message and, when it has none, when the next one shows. Idle
// consumers then poll without taking the writer from everyone else. A
// message committed after the read is not lost: its Send wakes the poll.
func (q *Queue) peek(ctx context.Context, queue string) (next time.Time, ready bool, err error) {
	if err := q.s.checkOpen(); err != nil {
		return time.Time{}, false, err
	}
	now := q.s.clk.Now().UnixNano()
	var changed <-chan struct{}
	if q.s.scratch {
		// Only a send or a visibility change (both notify) or the time
		// passing the first message's can make one visible: until then
		// the last peek's answer stands.
		if next, ok := q.s.stillIdle(queue, now); ok {
			return next, false, nil
		}
		changed = q.s.waiters.watch(queue)
	}
	var first sql.NullInt64
	if err := q.s.readRow(ctx, selectFirstVisible, queue).Scan(&first); err != nil {
		return time.Time{}, false, fmt.Errorf("peek: %w", err)
	}
	switch {
	case !first.Valid:
		q.s.noteIdle(queue, changed, time.Time{})
		return time.Time{}, false, nil
	case first.Int64 > now:
		next := time.Unix(0, first.Int64).UTC()
		q.s.noteIdle(queue, changed, next)
		return next, false, nil
	}
	return time.Time{}, true, nil
}

// idleQueue is a queue with nothing visible before until (zero: nothing
// at all) as long as changed is open.
type idleQueue struct {
	changed <-chan struct{}
	until   time.Time
}

func (s *Store) noteIdle(queue string, changed <-chan struct{}, until time.Time) {
	if changed == nil {
		return
	}
	s.idleMu.Lock()
	defer s.idleMu.Unlock()
	if s.idle == nil {
		s.idle = map[string]idleQueue{}
	}
	s.idle[queue] = idleQueue{changed: changed, until: until}
}

// stillIdle reports whether queue is still known to have nothing visible
// at now, and when its first message shows.
func (s *Store) stillIdle(queue string, now int64) (time.Time, bool) {
	s.idleMu.Lock()
	defer s.idleMu.Unlock()
	m, ok := s.idle[queue]
	if !ok {
		return time.Time{}, false
	}
	select {
	case <-m.changed:
		delete(s.idle, queue)
		return time.Time{}, false
	default:
	}
	if !m.until.IsZero() && m.until.UnixNano() <= now {
		delete(s.idle, queue)
		return time.Time{}, false
	}
	return m.until, true
}

func (q *Queue) selectMessages(ctx context.Context, tx *sql.Tx, queue string, now int64, max int) ([]domain.Message, []int64, error) {
	stmt, err := q.s.txStmt(ctx, tx, selectVisible)
	if err != nil {
		return nil, nil, err
	}
	rows, err := stmt.QueryContext(ctx, queue, now, max)
	if err != nil {
		return nil, nil, fmt.Errorf("select visible: %w", err)
	}
	defer rows.Close()
	var msgs []domain.Message
	var seqs []int64
	for rows.Next() {
		var m domain.Message
		var seq, sent int64
		if err := rows.Scan(&seq, &m.Body, &sent, &m.Receives); err != nil {
			return nil, nil, fmt.Errorf("select visible: %w", err)
		}
		m.ID, m.SentAt = strconv.FormatInt(seq, 10), time.Unix(0, sent).UTC()
		msgs, seqs = append(msgs, m), append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("select visible: %w", err)
	}
	return msgs, seqs, nil
}

// markMessages hides msgs until hiddenUntil and hands each a new receipt.
func (q *Queue) markMessages(ctx context.Context, tx *sql.Tx, msgs []domain.Message, seqs []int64, hiddenUntil int64) error {
	random := make([]byte, tokenBytes*len(msgs))
	if _, err := rand.Read(random); err != nil {
		return fmt.Errorf("receipt tokens: %w", err)
	}
	stmt, err := q.s.txStmt(ctx, tx, markReceived)
	if err != nil {
		return err
	}
	for k, seq := range seqs {
		token := hex.EncodeToString(random[k*tokenBytes : (k+1)*tokenBytes])
		if _, err := stmt.ExecContext(ctx, hiddenUntil, token, seq); err != nil {
			return fmt.Errorf("mark message %d received: %w", seq, err)
		}
		msgs[k].Receipt = formatReceipt(seq, token)
		msgs[k].Receives++
	}
	return nil
}

func (q *Queue) nextVisible(ctx context.Context, tx *sql.Tx, queue string, now int64) (time.Time, error) {
	var next sql.NullInt64
	stmt, err := q.s.txStmt(ctx, tx, selectNextVisible)
	if err != nil {
		return time.Time{}, err
	}
	if err := stmt.QueryRowContext(ctx, queue, now).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("next visible: %w", err)
	}
	if !next.Valid {
		return time.Time{}, nil
	}
	return time.Unix(0, next.Int64).UTC(), nil
}
