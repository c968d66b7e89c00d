package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// TransitionJob applies fn to job id if it matches g, in one write
// transaction decided by domain.ApplyJobTransition. It returns ErrNotFound,
// a *domain.JobConflictError or a *domain.JobTransitionError. fn runs while
// the writer is held, so it must be quick and must not call the store.
func (s *Store) TransitionJob(ctx context.Context, id int64, g domain.JobGuard, fn func(*domain.Job)) (domain.Job, error) {
	var out domain.Job
	var refused error
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, refused, err = transitionJobOne(ctx, s.txJobStmts(ctx, tx), s.clk.Now(), id, g, fn)
		return err
	})
	if err != nil {
		return domain.Job{}, fmt.Errorf("transition job %d: %w", id, err)
	}
	if refused != nil {
		return domain.Job{}, refused
	}
	return out, nil
}

// TransitionJobs applies every request in one write transaction. Each
// request has its own outcome, in request order; the error is for the batch
// as a whole, in which case nothing was written.
func (s *Store) TransitionJobs(ctx context.Context, reqs []domain.JobTransitionRequest) ([]domain.JobTransitionResult, error) {
	if len(reqs) == 0 {
		if err := s.checkOpen(); err != nil {
			return nil, fmt.Errorf("transition jobs: %w", err)
		}
		return []domain.JobTransitionResult{}, nil
	}
	var results []domain.JobTransitionResult
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		stmts := s.txJobStmts(ctx, tx)
		now := s.clk.Now()
		results = make([]domain.JobTransitionResult, len(reqs))
		for k, r := range reqs {
			j, refused, err := transitionJobOne(ctx, stmts, now, r.ID, r.Guard, r.Apply)
			if err != nil {
				return fmt.Errorf("job %d: %w", r.ID, err)
			}
			results[k] = domain.JobTransitionResult{Job: j, Err: refused}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("transition jobs: %w", err)
	}
	return results, nil
}

// transitionJobOne is the read-check-write of one job transition inside a
// write transaction: refused is the caller's outcome, err a database
// failure that dooms the transaction.
func transitionJobOne(ctx context.Context, st writeStmts, now time.Time, id int64, g domain.JobGuard, fn func(*domain.Job)) (out domain.Job, refused, err error) {
	cur, err := scanJob(st.get.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return domain.Job{}, fmt.Errorf("job %d: %w", id, domain.ErrNotFound), nil
	}
	if err != nil {
		return domain.Job{}, nil, fmt.Errorf("read: %w", err)
	}
	if fn == nil {
		fn = func(*domain.Job) {}
	}
	next, refused := domain.ApplyJobTransition(cur, g, now, fn)
	if refused != nil {
		return domain.Job{}, refused, nil
	}
	next = normalizeJobTimes(next)
	if err := validateJob(next); err != nil {
		return domain.Job{}, err, nil
	}
	args, err := jobArgs(next)
	if err != nil {
		return domain.Job{}, err, nil
	}
	res, err := st.update.ExecContext(ctx, append(args[1:], next.ID)...)
	if err != nil {
		return domain.Job{}, nil, fmt.Errorf("write: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return domain.Job{}, nil, fmt.Errorf("write: %d rows updated (%v)", n, err)
	}
	return next, nil, nil
}
