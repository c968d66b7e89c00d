package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// refusal carries a refused transition out of the write transaction, so
// that inWriteTx rolls the whole change back.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }

// Commit applies every transition of c in one write transaction: all of
// them, or none when one is refused (the error is that refusal).
func (s *Store) Commit(ctx context.Context, c domain.Change) (domain.Changed, error) {
	out := domain.Changed{
		Instances: make([]domain.Instance, len(c.Instances)),
		Jobs:      make([]domain.Job, len(c.Jobs)),
	}
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		now := s.clk.Now()
		is, js := instanceKind.stmts(ctx, s, tx), jobKind.stmts(ctx, s, tx)
		for n, r := range c.Instances {
			row, refused, err := instanceKind.one(ctx, is, now, r.ID, r.Guard, r.Apply)
			if err != nil {
				return fmt.Errorf("instance %s: %w", r.ID, err)
			}
			if refused != nil {
				return &refusal{refused}
			}
			out.Instances[n] = row
		}
		for n, r := range c.Jobs {
			row, refused, err := jobKind.one(ctx, js, now, r.ID, r.Guard, r.Apply)
			if err != nil {
				return fmt.Errorf("job %d: %w", r.ID, err)
			}
			if refused != nil {
				return &refusal{refused}
			}
			out.Jobs[n] = row
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
