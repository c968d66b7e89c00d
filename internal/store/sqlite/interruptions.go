package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// RecordInterruption keeps i, and deletes in the same write the rows that
// have expired: interruptions are few, so the table stays small without a
// sweep of its own.
func (s *Store) RecordInterruption(ctx context.Context, i domain.Interruption) error {
	if err := i.Check(); err != nil {
		return fmt.Errorf("record interruption %s: %w", i.ID, err)
	}
	now := s.clk.Now()
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM interruptions WHERE expires <= ?`, formatTime(now)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO interruptions (id, runner, at, expires) VALUES (?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`, i.ID, i.Runner, formatTime(i.At), formatTime(i.Expires))
		return err
	})
	if err != nil {
		return fmt.Errorf("record interruption %s: %w", i.ID, err)
	}
	return nil
}

// ListInterruptions reads the rows at or after since that have not
// expired by the store's clock.
func (s *Store) ListInterruptions(ctx context.Context, since time.Time) ([]domain.Interruption, error) {
	if err := domain.CheckTime("since", since); err != nil {
		return nil, fmt.Errorf("list interruptions: %w", err)
	}
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("list interruptions: %w", err)
	}
	from := "" // every stored time sorts after it
	if !since.IsZero() {
		from = since.UTC().Format(timeLayout)
	}
	rows, err := s.read(ctx, `SELECT id, runner, at, expires FROM interruptions WHERE at >= ? AND expires > ? ORDER BY at, id`,
		from, formatTime(s.clk.Now()))
	if err != nil {
		return nil, fmt.Errorf("list interruptions: %w", err)
	}
	defer rows.Close()
	var out []domain.Interruption
	for rows.Next() {
		var i domain.Interruption
		var at, expires sql.NullString
		if err := rows.Scan(&i.ID, &i.Runner, &at, &expires); err != nil {
			return nil, fmt.Errorf("list interruptions: %w", err)
		}
		if i.At, err = parseTime(at); err == nil {
			i.Expires, err = parseTime(expires)
		}
		if err != nil {
			return nil, fmt.Errorf("list interruptions: %s: %w", i.ID, err)
		}
		out = append(out, i)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list interruptions: %w", err)
	}
	return out, nil
}
