package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// PutConfiguration keeps c as the configuration last in force from its
// source.
func (s *Store) PutConfiguration(ctx context.Context, c domain.ConfigRecord) error {
	if err := c.Check(); err != nil {
		return fmt.Errorf("put configuration %s: %w", c.Source, err)
	}
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		const q = `INSERT INTO configurations (source, data, put_at) VALUES (?, ?, ?)
			ON CONFLICT (source) DO UPDATE SET data = excluded.data, put_at = excluded.put_at`
		_, err := tx.ExecContext(ctx, q, c.Source, c.Data, formatTime(c.At))
		return err
	})
	if err != nil {
		return fmt.Errorf("put configuration %s: %w", c.Source, err)
	}
	return nil
}

// GetConfiguration reads what is kept for source.
func (s *Store) GetConfiguration(ctx context.Context, source string) (domain.ConfigRecord, bool, error) {
	if err := s.checkOpen(); err != nil {
		return domain.ConfigRecord{}, false, fmt.Errorf("get configuration %s: %w", source, err)
	}
	c := domain.ConfigRecord{Source: source}
	var at sql.NullString
	err := s.readers.QueryRowContext(ctx, `SELECT data, put_at FROM configurations WHERE source = ?`, source).Scan(&c.Data, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return domain.ConfigRecord{}, false, nil
	}
	if err == nil {
		c.At, err = parseTime(at)
	}
	if err != nil {
		return domain.ConfigRecord{}, false, fmt.Errorf("get configuration %s: %w", source, err)
	}
	return c, true, nil
}
