package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"time"
)

//go:embed migrations/*.sql
var embeddedMigrations embed.FS

// migrationsFS returns the migrations compiled into this binary.
func migrationsFS() fs.FS {
	sub, err := fs.Sub(embeddedMigrations, "migrations")
	if err != nil {
		panic("sqlite: embedded migrations: " + err.Error()) // fixed path, cannot fail
	}
	return sub
}

// ErrNewerSchema says the database was migrated by a newer bullpen than this
// one: it holds migrations this binary does not know, so it refuses to touch
// it rather than guess what they changed.
var ErrNewerSchema = errors.New("database schema is newer than this binary")

// migration is one numbered schema change, applied once, in order.
type migration struct {
	Version int
	Name    string
	SQL     string
}

var migrationName = regexp.MustCompile(`^([0-9]{4})_([a-z0-9_]+)\.sql$`)

// loadMigrations reads every *.sql file at the root of fsys, in version order.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var out []migration
	seen := map[int]string{}
	for _, name := range names {
		m := migrationName.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("migration %q: name must look like 0001_description.sql", name)
		}
		v, _ := strconv.Atoi(m[1])
		if v == 0 {
			return nil, fmt.Errorf("migration %q: versions start at 0001", name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %q and %q share version %04d", prev, name, v)
		}
		seen[v] = name
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", name, err)
		}
		out = append(out, migration{Version: v, Name: m[2], SQL: string(body)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.Version - b.Version })
	return out, nil
}

// migrate brings the schema of db up to date with the migrations in fsys.
// Each migration runs in its own write transaction that re-reads what is
// applied, so two processes opening the same new file cannot both apply one.
func migrate(ctx context.Context, db *sql.DB, fsys fs.FS, now func() time.Time) error {
	known, err := loadMigrations(fsys)
	if err != nil {
		return err
	}
	const ddl = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER NOT NULL PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at TEXT    NOT NULL
	) STRICT`
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	for {
		done, err := applyNextMigration(ctx, db, known, now)
		if err != nil || done {
			return err
		}
	}
}

// applyNextMigration applies the first pending migration, reporting done when
// none is left.
func applyNextMigration(ctx context.Context, db *sql.DB, known []migration, now func() time.Time) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback()
	applied, err := appliedMigrations(ctx, tx)
	if err != nil {
		return false, err
	}
	next, err := nextMigration(known, applied)
	if err != nil || next == nil {
		return next == nil, err
	}
	if _, err := tx.ExecContext(ctx, next.SQL); err != nil {
		return false, fmt.Errorf("migration %04d_%s: %w", next.Version, next.Name, err)
	}
	const record = `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`
	if _, err := tx.ExecContext(ctx, record, next.Version, next.Name, formatTime(now())); err != nil {
		return false, fmt.Errorf("record migration %04d_%s: %w", next.Version, next.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migration %04d_%s: commit: %w", next.Version, next.Name, err)
	}
	return false, nil
}

// appliedMigrations maps each recorded version to its name.
func appliedMigrations(ctx context.Context, tx *sql.Tx) (map[int]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT version, name FROM schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	defer rows.Close()
	applied := map[int]string{}
	for rows.Next() {
		var v int
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			return nil, fmt.Errorf("read schema_migrations: %w", err)
		}
		applied[v] = name
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	return applied, nil
}

// nextMigration picks the lowest pending migration, refusing databases that
// hold migrations this binary does not know and pending migrations that
// would run after a later one (which would apply changes out of order).
func nextMigration(known []migration, applied map[int]string) (*migration, error) {
	latest := 0
	if len(known) > 0 {
		latest = known[len(known)-1].Version
	}
	var unknown []int
	for v := range applied {
		if !slices.ContainsFunc(known, func(m migration) bool { return m.Version == v }) {
			unknown = append(unknown, v)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		v := unknown[len(unknown)-1]
		return nil, fmt.Errorf("%w: it has migration %04d_%s but this binary knows migrations up to %04d; upgrade bullpen or use another database file",
			ErrNewerSchema, v, applied[v], latest)
	}
	for i, m := range known {
		if _, ok := applied[m.Version]; ok {
			continue
		}
		for _, later := range known[i+1:] {
			if _, ok := applied[later.Version]; ok {
				return nil, fmt.Errorf("migration %04d_%s is pending but the later %04d_%s is already applied",
					m.Version, m.Name, later.Version, later.Name)
			}
		}
		return &known[i], nil
	}
	return nil, nil
}
