package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// refusal carries a refused transition out of the write transaction, so
// that inWriteTx rolls the whole change back.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }

// Commit applies every transition of c in one write transaction: all of
// them, or none when one is refused (the error is that refusal).
func (s *Store) Commit(ctx context.Context, c domain.Change) (domain.Changed, error) {
	var out domain.Changed
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var refused error
		var err error
		out, refused, err = s.apply(ctx, tx, s.clk.Now(), c)
		if err != nil {
			return err
		}
		if refused != nil {
			return &refusal{refused}
		}
		return nil
	})
	if r, ok := errors.AsType[*refusal](err); ok {
		return domain.Changed{}, r.err
	}
	if err != nil {
		return domain.Changed{}, fmt.Errorf("commit change: %w", err)
	}
	return out, nil
}

// CommitEach applies each change atomically on its own, all in one write
// transaction (one lock, one commit): a refused change is rolled back to
// its savepoint and the others go on. The error is for the batch as a
// whole, in which case nothing was written.
func (s *Store) CommitEach(ctx context.Context, cs []domain.Change) ([]domain.ChangeResult, error) {
	if len(cs) == 0 {
		if err := s.checkOpen(); err != nil {
			return nil, fmt.Errorf("commit changes: %w", err)
		}
		return []domain.ChangeResult{}, nil
	}
	results := make([]domain.ChangeResult, len(cs))
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		now := s.clk.Now()
		for n, c := range cs {
			if _, err := tx.ExecContext(ctx, `SAVEPOINT change`); err != nil {
				return fmt.Errorf("savepoint: %w", err)
			}
			out, refused, err := s.apply(ctx, tx, now, c)
			if err != nil {
				return err
			}
			if refused != nil {
				if _, err := tx.ExecContext(ctx, `ROLLBACK TO change`); err != nil {
					return fmt.Errorf("roll back to savepoint: %w", err)
				}
				out = domain.Changed{}
			}
			if _, err := tx.ExecContext(ctx, `RELEASE change`); err != nil {
				return fmt.Errorf("release savepoint: %w", err)
			}
			results[n] = domain.ChangeResult{Changed: out, Err: refused}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("commit changes: %w", err)
	}
	return results, nil
}

// apply runs the transitions of c in order inside tx. refused is the first
// transition refused (the caller rolls back); err dooms the transaction.
func (s *Store) apply(ctx context.Context, tx *sql.Tx, now time.Time, c domain.Change) (out domain.Changed, refused, err error) {
	is, js := instanceKind.stmts(ctx, s, tx), jobKind.stmts(ctx, s, tx)
	out.Instances, refused, err = instanceKind.inOrder(ctx, is, now, c.Instances)
	if refused != nil || err != nil {
		return out, refused, err
	}
	out.Jobs, refused, err = jobKind.inOrder(ctx, js, now, c.Jobs)
	return out, refused, err
}
