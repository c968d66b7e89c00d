package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// writerQueries are prepared once, on the writer connection, when the store
// opens: every write transaction runs on that one connection, so binding a
// prepared statement to a transaction costs nothing and no call compiles
// SQL on the hot path.
var writerQueries = []string{
	insertInstance, selectInstance, updateInstance,
	insertJob, selectJob, updateJob,
	insertMessage, purgeDedup, insertDedup, deleteMessage, changeVisible,
	selectVisible, markReceived, selectNextVisible,
	updateHeartbeat, upsertPoolStatus,
}

func (s *Store) prepareWriteStmts(ctx context.Context) error {
	s.prepared = make(map[string]*sql.Stmt, len(writerQueries))
	for _, q := range writerQueries {
		st, err := s.writer.PrepareContext(ctx, q)
		if err != nil {
			s.closeStmts()
			return fmt.Errorf("prepare %.60q: %w", q, err)
		}
		s.prepared[q] = st
	}
	return nil
}

// closeStmts closes whatever prepareWriteStmts prepared.
func (s *Store) closeStmts() error {
	var errs []error
	for _, st := range s.prepared {
		errs = append(errs, st.Close())
	}
	s.reads.Range(func(_, v any) bool {
		errs = append(errs, v.(*sql.Stmt).Close())
		return true
	})
	return errors.Join(errs...)
}

// readStmt returns query prepared on the readers, preparing it the first
// time: SQLite's parser is a large share of a read's cost, and the loops
// read the same few shapes over and over.
func (s *Store) readStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := s.reads.Load(query); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := s.readers.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if prev, loaded := s.reads.LoadOrStore(query, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

// read runs a query on the readers through the statement cache.
func (s *Store) read(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.readStmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// readRow is read for a single row.
func (s *Store) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := s.readStmt(ctx, query)
	if err != nil {
		// Let the caller's Scan report it, as QueryRowContext would.
		return s.readers.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// txStmt returns the prepared statement of query bound to tx, preparing it
// on tx if it is not one of writerQueries.
func (s *Store) txStmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	if st, ok := s.prepared[query]; ok {
		return tx.StmtContext(ctx, st), nil
	}
	st, err := tx.PrepareContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	return st, nil
}

// rowKind is one kind of row as the store reads and changes it: how to
// read a row, decide what to write and write it. Reading one row or a
// list, the write transaction, the batch and the errors around them are
// the same for instances and jobs, and are written once below.
type rowKind[ID, Row, Guard, Req, Res any] struct {
	noun        string // names a row in errors: "instance", "job"
	batchOp     string // names the batch call in its errors
	get, update string // writerQueries reading (also on the readers) and writing one row by id
	read        func(scanner) (Row, error)
	// apply is the domain's decision (domain.ApplyTransition and its job
	// twin); normalize gives the row its times as they read back, and
	// validate refuses what the store could not hold (see decide).
	apply     func(cur Row, g Guard, now time.Time, fn func(*Row)) (Row, error)
	normalize func(Row) Row
	validate  func(Row) error
	// write returns update's arguments; an error refuses the transition.
	write   func(Row) ([]any, error)
	request func(Req) (ID, Guard, func(*Row))
	result  func(Row, error) Res
}

var instanceKind = rowKind[string, domain.Instance, domain.Guard, domain.TransitionRequest, domain.TransitionResult]{
	noun: "instance", batchOp: "transition batch",
	get: selectInstance, update: updateInstance,
	read:  scanInstance,
	apply: domain.ApplyTransition, normalize: normalizeTimes, validate: domain.Instance.Validate,
	write: func(i domain.Instance) ([]any, error) { return updateArgs(i), nil },
	request: func(r domain.TransitionRequest) (string, domain.Guard, func(*domain.Instance)) {
		return r.ID, r.Guard, r.Apply
	},
	result: func(i domain.Instance, refused error) domain.TransitionResult {
		return domain.TransitionResult{Instance: i, Err: refused}
	},
}

// decide returns the row to write, or why the transition is refused.
func (k *rowKind[ID, Row, Guard, Req, Res]) decide(cur Row, g Guard, now time.Time, fn func(*Row)) (Row, error) {
	next, refused := k.apply(cur, g, now, fn)
	if refused != nil {
		var zero Row
		return zero, refused
	}
	next = k.normalize(next)
	return next, k.validate(next)
}

// Transition applies fn to the instance id if it matches g, in one write
// transaction decided by domain.ApplyTransition. It returns ErrNotFound, a
// *domain.ConflictError or a *domain.TransitionError as the port documents.
// fn runs while the writer is held, so it must be quick and must not call
// the store.
func (s *Store) Transition(ctx context.Context, id string, g domain.Guard, fn func(*domain.Instance)) (domain.Instance, error) {
	return instanceKind.transition(ctx, s, id, g, fn)
}

// TransitionBatch applies every request in one write transaction, which is
// what makes it fast: one lock and one commit for the lot. Each request has
// its own outcome; the error is for the batch as a whole (a closed store, a
// failed commit), in which case nothing was written.
func (s *Store) TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error) {
	return instanceKind.transitionBatch(ctx, s, reqs)
}

// getRow reads the row with id, or ErrNotFound.
func (k *rowKind[ID, Row, Guard, Req, Res]) getRow(ctx context.Context, s *Store, id ID) (Row, error) {
	var zero Row
	if err := s.checkOpen(); err != nil {
		return zero, fmt.Errorf("get %s %v: %w", k.noun, id, err)
	}
	row, err := k.read(s.readRow(ctx, k.get, id))
	if errors.Is(err, sql.ErrNoRows) {
		return zero, fmt.Errorf("get %s %v: %w", k.noun, id, domain.ErrNotFound)
	}
	if err != nil {
		return zero, fmt.Errorf("get %s %v: %w", k.noun, id, err)
	}
	return row, nil
}

// listRows reads the rows a list query selects, in its order.
func (k *rowKind[ID, Row, Guard, Req, Res]) listRows(ctx context.Context, s *Store, query string, args []any) ([]Row, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("list %ss: %w", k.noun, err)
	}
	rows, err := s.read(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list %ss: %w", k.noun, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		row, err := k.read(rows)
		if err != nil {
			return nil, fmt.Errorf("list %ss: %w", k.noun, err)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %ss: %w", k.noun, err)
	}
	return out, nil
}

// transition is one guarded transition in its own write transaction.
func (k *rowKind[ID, Row, Guard, Req, Res]) transition(ctx context.Context, s *Store, id ID, g Guard, fn func(*Row)) (Row, error) {
	var out, zero Row
	var refused error
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, refused, err = k.one(ctx, k.stmts(ctx, s, tx), s.clk.Now(), id, g, fn)
		return err
	})
	if err != nil {
		return zero, fmt.Errorf("transition %s %v: %w", k.noun, id, err)
	}
	if refused != nil {
		return zero, refused
	}
	return out, nil
}

// transitionBatch is every request in one write transaction, each with its
// own outcome in request order; the error is for the batch as a whole.
func (k *rowKind[ID, Row, Guard, Req, Res]) transitionBatch(ctx context.Context, s *Store, reqs []Req) ([]Res, error) {
	if len(reqs) == 0 {
		if err := s.checkOpen(); err != nil {
			return nil, fmt.Errorf("%s: %w", k.batchOp, err)
		}
		return []Res{}, nil
	}
	var results []Res
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		stmts := k.stmts(ctx, s, tx)
		now := s.clk.Now()
		results = make([]Res, len(reqs))
		for n, r := range reqs {
			id, g, fn := k.request(r)
			row, refused, err := k.one(ctx, stmts, now, id, g, fn)
			if err != nil {
				return fmt.Errorf("%s %v: %w", k.noun, id, err)
			}
			results[n] = k.result(row, refused)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.batchOp, err)
	}
	return results, nil
}

// inOrder runs reqs in order inside a write transaction, up to the first
// refused (the caller rolls back); err dooms the transaction.
func (k *rowKind[ID, Row, Guard, Req, Res]) inOrder(ctx context.Context, st writeStmts, now time.Time, reqs []Req) (rows []Row, refused, err error) {
	rows = make([]Row, len(reqs))
	for n, r := range reqs {
		id, g, fn := k.request(r)
		row, refused, err := k.one(ctx, st, now, id, g, fn)
		if err != nil {
			return rows, nil, fmt.Errorf("%s %v: %w", k.noun, id, err)
		}
		if refused != nil {
			return rows, refused, nil
		}
		rows[n] = row
	}
	return rows, nil, nil
}

// writeStmts are the read and write statements of one kind of row's
// transition, bound to a transaction.
type writeStmts struct {
	get, update *sql.Stmt
}

func (k *rowKind[ID, Row, Guard, Req, Res]) stmts(ctx context.Context, s *Store, tx *sql.Tx) writeStmts {
	return writeStmts{get: tx.StmtContext(ctx, s.prepared[k.get]), update: tx.StmtContext(ctx, s.prepared[k.update])}
}

// one is the read-check-write of one transition inside a write
// transaction. refused is the caller's outcome (not found, conflict, illegal
// transition); err is a database failure that dooms the transaction.
func (k *rowKind[ID, Row, Guard, Req, Res]) one(ctx context.Context, st writeStmts, now time.Time, id ID, g Guard, fn func(*Row)) (out Row, refused, err error) {
	var zero Row
	cur, err := k.read(st.get.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return zero, fmt.Errorf("%s %v: %w", k.noun, id, domain.ErrNotFound), nil
	}
	if err != nil {
		return zero, nil, fmt.Errorf("read: %w", err)
	}
	if fn == nil {
		fn = func(*Row) {}
	}
	next, refused := k.decide(cur, g, now, fn)
	if refused != nil {
		return zero, refused, nil
	}
	args, refused := k.write(next)
	if refused != nil {
		return zero, refused, nil
	}
	res, err := st.update.ExecContext(ctx, args...)
	if err != nil {
		return zero, nil, fmt.Errorf("write: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return zero, nil, fmt.Errorf("write: %d rows updated (%v)", n, err)
	}
	return next, nil, nil
}

// normalizeTimes returns i with its times as they read back: in UTC.
func normalizeTimes(i domain.Instance) domain.Instance {
	inUTC(&i.Deadline, &i.CreatedAt, &i.UpdatedAt, &i.StateSince, &i.RunningSince, &i.Heartbeat)
	return i
}

// inUTC sets each time as it reads back: in UTC, or the zero time.
func inUTC(ts ...*time.Time) {
	for _, t := range ts {
		if t.IsZero() {
			*t = time.Time{}
		} else {
			*t = t.UTC()
		}
	}
}
