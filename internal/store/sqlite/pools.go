package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// PutPoolStatus stores s, replacing what was stored under its name.
func (s *Store) PutPoolStatus(ctx context.Context, st domain.PoolStatus) error {
	if st.Name == "" {
		return errors.New("put pool status: no pool name")
	}
	doc, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("put pool status %s: %w", st.Name, err)
	}
	err = s.inWriteTx(ctx, func(tx *sql.Tx) error {
		stmt, err := s.txStmt(ctx, tx, upsertPoolStatus)
		if err != nil {
			return err
		}
		_, err = stmt.ExecContext(ctx, st.Name, string(doc), formatTime(s.clk.Now()))
		return err
	})
	if err != nil {
		return fmt.Errorf("put pool status %s: %w", st.Name, err)
	}
	return nil
}

const upsertPoolStatus = `INSERT INTO pool_status (name, doc, updated_at) VALUES (?, ?, ?)
	ON CONFLICT (name) DO UPDATE SET doc = excluded.doc, updated_at = excluded.updated_at`

// ListPoolStatus returns every stored pool status, ordered by name.
func (s *Store) ListPoolStatus(ctx context.Context) ([]domain.PoolStatus, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("list pool status: %w", err)
	}
	rows, err := s.readers.QueryContext(ctx, `SELECT name, doc FROM pool_status ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list pool status: %w", err)
	}
	defer rows.Close()
	var out []domain.PoolStatus
	for rows.Next() {
		var name, doc string
		if err := rows.Scan(&name, &doc); err != nil {
			return nil, fmt.Errorf("list pool status: %w", err)
		}
		var st domain.PoolStatus
		if err := json.Unmarshal([]byte(doc), &st); err != nil {
			return nil, fmt.Errorf("list pool status: pool %s: %w", name, err)
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pool status: %w", err)
	}
	return out, nil
}

// AcquireLease takes name for holder until now+ttl when it is free, expired
// (at or past its expiry) or already held by holder. Otherwise it returns
// the current lease and false.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (domain.Lease, bool, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return domain.Lease{}, false, fmt.Errorf("acquire lease %q for %q: need a name, a holder and a positive ttl (got %v)", name, holder, ttl)
	}
	var lease domain.Lease
	var ok bool
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		now := s.clk.Now().UTC()
		cur, found, err := readLease(ctx, tx, name)
		if err != nil {
			return err
		}
		if found && cur.Holder != holder && now.Before(cur.Expires) {
			lease, ok = cur, false
			return nil
		}
		lease, ok = domain.Lease{Name: name, Holder: holder, Expires: now.Add(ttl)}, true
		const q = `INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at`
		_, err = tx.ExecContext(ctx, q, name, holder, formatTime(lease.Expires))
		return err
	})
	if err != nil {
		return domain.Lease{}, false, fmt.Errorf("acquire lease %s for %s: %w", name, holder, err)
	}
	return lease, ok, nil
}

func readLease(ctx context.Context, tx *sql.Tx, name string) (domain.Lease, bool, error) {
	l := domain.Lease{Name: name}
	var expires sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT holder, expires_at FROM leases WHERE name = ?`, name).Scan(&l.Holder, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return domain.Lease{}, false, nil
	}
	if err != nil {
		return domain.Lease{}, false, err
	}
	l.Expires, err = parseTime(expires)
	return l, err == nil, err
}

// ReleaseLease gives name up if holder has it; otherwise it does nothing.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM leases WHERE name = ? AND holder = ?`, name, holder)
		return err
	})
	if err != nil {
		return fmt.Errorf("release lease %s for %s: %w", name, holder, err)
	}
	return nil
}
