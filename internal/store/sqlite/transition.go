package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// writeStmts are the statements a transition needs, bound to one transaction.
type writeStmts struct {
	get, update *sql.Stmt
}

// prepareWriteStmts prepares the transition statements on the writer. With a
// single writer connection they are compiled once and reused by every
// transaction.
func (s *Store) prepareWriteStmts(ctx context.Context) error {
	get, err := s.writer.PrepareContext(ctx, selectInstance)
	if err != nil {
		return fmt.Errorf("prepare select: %w", err)
	}
	update, err := s.writer.PrepareContext(ctx, updateInstance)
	if err != nil {
		get.Close()
		return fmt.Errorf("prepare update: %w", err)
	}
	s.stmts = writeStmts{get: get, update: update}
	return nil
}

func (s *Store) txStmts(ctx context.Context, tx *sql.Tx) writeStmts {
	return writeStmts{get: tx.StmtContext(ctx, s.stmts.get), update: tx.StmtContext(ctx, s.stmts.update)}
}

// Transition applies fn to the instance id if it matches g, in one write
// transaction decided by domain.ApplyTransition. It returns ErrNotFound, a
// *domain.ConflictError or a *domain.TransitionError as the port documents.
// fn runs while the writer is held, so it must be quick and must not call
// the store.
func (s *Store) Transition(ctx context.Context, id string, g domain.Guard, fn func(*domain.Instance)) (domain.Instance, error) {
	var out domain.Instance
	var refused error
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, refused, err = transitionOne(ctx, s.txStmts(ctx, tx), s.clk.Now(), id, g, fn)
		return err
	})
	if err != nil {
		return domain.Instance{}, fmt.Errorf("transition instance %s: %w", id, err)
	}
	if refused != nil {
		return domain.Instance{}, refused
	}
	return out, nil
}

// TransitionBatch applies every request in one write transaction, which is
// what makes it fast: one lock and one commit for the lot. Each request has
// its own outcome; the error is for the batch as a whole (a closed store, a
// failed commit), in which case nothing was written.
func (s *Store) TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error) {
	if len(reqs) == 0 {
		if err := s.checkOpen(); err != nil {
			return nil, fmt.Errorf("transition batch: %w", err)
		}
		return []domain.TransitionResult{}, nil
	}
	var results []domain.TransitionResult
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		stmts := s.txStmts(ctx, tx)
		now := s.clk.Now()
		results = make([]domain.TransitionResult, len(reqs))
		for k, r := range reqs {
			inst, refused, err := transitionOne(ctx, stmts, now, r.ID, r.Guard, r.Apply)
			if err != nil {
				return fmt.Errorf("instance %s: %w", r.ID, err)
			}
			results[k] = domain.TransitionResult{Instance: inst, Err: refused}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("transition batch: %w", err)
	}
	return results, nil
}

// transitionOne is the read-check-write of one transition inside a write
// transaction. refused is the caller's outcome (not found, conflict, illegal
// transition); err is a database failure that dooms the transaction.
func transitionOne(ctx context.Context, st writeStmts, now time.Time, id string, g domain.Guard, fn func(*domain.Instance)) (out domain.Instance, refused, err error) {
	cur, err := scanInstance(st.get.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return domain.Instance{}, fmt.Errorf("instance %s: %w", id, domain.ErrNotFound), nil
	}
	if err != nil {
		return domain.Instance{}, nil, fmt.Errorf("read: %w", err)
	}
	if fn == nil {
		fn = func(*domain.Instance) {}
	}
	next, refused := domain.ApplyTransition(cur, g, now, fn)
	if refused != nil {
		return domain.Instance{}, refused, nil
	}
	next = normalizeTimes(next)
	if err := validateInstance(next); err != nil {
		return domain.Instance{}, err, nil
	}
	res, err := st.update.ExecContext(ctx, updateArgs(next)...)
	if err != nil {
		return domain.Instance{}, nil, fmt.Errorf("write: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return domain.Instance{}, nil, fmt.Errorf("write: %d rows updated (%v)", n, err)
	}
	return next, nil, nil
}

// normalizeTimes returns i with its times as they read back: in UTC.
func normalizeTimes(i domain.Instance) domain.Instance {
	for _, t := range []*time.Time{&i.Deadline, &i.CreatedAt, &i.UpdatedAt, &i.StateSince, &i.RunningSince} {
		if t.IsZero() {
			*t = time.Time{}
		} else {
			*t = t.UTC()
		}
	}
	return i
}
