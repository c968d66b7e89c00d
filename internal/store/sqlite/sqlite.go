// Package sqlite is bullpen's embedded store: one SQLite file, nothing to
// install. It implements domain.Store with one writer connection (so writes
// queue inside the process instead of failing with "database is locked"),
// a pool of read-only connections, WAL journaling and a busy timeout for the
// rare other process that opens the same file. Store.Queue serves
// domain.Queue from the same file and the same writer.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// BusyTimeout is how long a connection waits for a lock held by another
// process before giving up.
const BusyTimeout = 5 * time.Second

// ErrClosed is returned by every call after Close.
var ErrClosed = errors.New("sqlite store: closed")

// Store is the SQLite implementation of domain.Store. It is safe for
// concurrent use.
type Store struct {
	path     string
	scratch  bool // a throwaway file: no syncs
	clk      domain.Clock
	writer   *sql.DB              // exactly one connection: every write transaction queues here
	readers  *sql.DB              // read-only connections for Get and List
	prepared map[string]*sql.Stmt // writerQueries, prepared on the writer
	reads    sync.Map             // query text → *sql.Stmt on readers: parse each read shape once
	waiters  waiters              // long polls of the queue, by queue name
	sends    groupSend            // concurrent queue sends, committed together
	// idle remembers, on a scratch store (this process its only user),
	// the queues a peek found with nothing visible: until when, and the
	// change that would end it (see Queue.peek).
	idleMu sync.Mutex
	idle   map[string]idleQueue

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ domain.Store = (*Store)(nil)

// Open opens (creating if needed) the database at path and applies any
// migrations this binary has that the file lacks. Timestamps the store
// writes come from clk.
func Open(ctx context.Context, path string, clk domain.Clock) (*Store, error) {
	return open(ctx, path, clk, migrationsFS(), false)
}

// OpenScratch is Open for a file thrown away when the process is done with
// it (a simulation's): SQLite never syncs it, since losing it to a crash
// loses nothing.
func OpenScratch(ctx context.Context, path string, clk domain.Clock) (*Store, error) {
	return open(ctx, path, clk, migrationsFS(), true)
}

func open(ctx context.Context, path string, clk domain.Clock, migrations fs.FS, scratch bool) (*Store, error) {
	if path == "" || strings.Contains(path, "?") || strings.HasPrefix(path, "file:") || path == ":memory:" {
		return nil, fmt.Errorf("open sqlite store: %q is not a plain file path", path)
	}
	if clk == nil {
		return nil, fmt.Errorf("open sqlite store %s: no clock", path)
	}
	if err := checkDirectory(path); err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	s := &Store{path: path, clk: clk, scratch: scratch}
	if err := s.openWriter(ctx, migrations); err != nil {
		return nil, err
	}
	if err := s.openReaders(ctx); err != nil {
		s.writer.Close()
		return nil, err
	}
	return s, nil
}

// checkDirectory says what is wrong with the directory path is in when
// SQLite could not create the file there, its WAL and shared-memory files
// beside it included: SQLite itself says only "unable to open database
// file", which names neither the directory nor what to do. A trial file,
// rather than the mode bits, tells whether this process may write there:
// it answers for root, ACLs and read-only mounts alike.
func checkDirectory(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist: create it (mkdir -p %s) or choose a file in another", dir, dir)
	case err != nil:
		return fmt.Errorf("directory %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	trial, err := os.CreateTemp(dir, ".bullpen-write-check-*")
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("directory %s is not writable by this user (uid %d): SQLite creates the store and its journal there; "+
			"give the user write access to it or choose a file in another", dir, os.Getuid())
	}
	if err != nil {
		return fmt.Errorf("directory %s is not writable: %w", dir, err)
	}
	trial.Close()
	_ = os.Remove(trial.Name()) // an empty file left behind harms nothing; refusing the store for it would
	return nil
}

func (s *Store) openWriter(ctx context.Context, migrations fs.FS) error {
	// _txlock=immediate takes the write lock at BEGIN: a transaction that
	// read first and upgraded later could fail with SQLITE_BUSY without
	// waiting if another process wrote in between.
	synchronous := "NORMAL"
	if s.scratch {
		synchronous = "OFF"
	}
	dsn := fmt.Sprintf("%s?_busy_timeout=%d&_foreign_keys=1&_journal_mode=WAL&_synchronous=%s&_txlock=immediate",
		s.path, BusyTimeout.Milliseconds(), synchronous)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fmt.Errorf("open sqlite store %s: %w", s.path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	fail := func(err error) error {
		db.Close()
		return fmt.Errorf("open sqlite store %s: %w", s.path, err)
	}
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return fail(err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fail(fmt.Errorf("journal mode is %q, need wal (is the file on a local file system?)", mode))
	}
	if err := migrate(ctx, db, migrations, s.clk.Now); err != nil {
		return fail(err)
	}
	s.writer = db
	if err := s.prepareWriteStmts(ctx); err != nil {
		return fail(err)
	}
	return nil
}

func (s *Store) openReaders(ctx context.Context) error {
	dsn := fmt.Sprintf("%s?_busy_timeout=%d&_foreign_keys=1&_query_only=1", s.path, BusyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fmt.Errorf("open sqlite store %s readers: %w", s.path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return fmt.Errorf("open sqlite store %s readers: %w", s.path, err)
	}
	s.readers = db
	return nil
}

// Close closes the database. It is safe to call more than once; every other
// call after it returns ErrClosed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		// Readers first: the last connection to close checkpoints the WAL
		// into the main file, and that should be the writer.
		s.waiters.closeAll()
		s.closeErr = errors.Join(s.closeStmts(), s.readers.Close(), s.writer.Close())
		if s.closeErr != nil {
			s.closeErr = fmt.Errorf("close sqlite store %s: %w", s.path, s.closeErr)
		}
	})
	return s.closeErr
}

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// inWriteTx runs fn in a write transaction on the single writer connection,
// committing when fn returns nil. The deferred rollback also covers a fn
// that panics, so the connection is never left inside a transaction.
func (s *Store) inWriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// timeLayout is fixed width, so that comparing the text compares the times.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

// formatTime renders t in UTC at nanosecond precision; the zero time is NULL.
func formatTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(timeLayout)
}

// parseTime reverses formatTime.
func parseTime(v sql.NullString) (time.Time, error) {
	if !v.Valid {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v.String)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse stored time %q: %w", v.String, err)
	}
	return t.UTC(), nil
}
