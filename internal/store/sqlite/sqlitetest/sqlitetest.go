// Package sqlitetest gives tests new, empty, migrated SQLite databases
// quickly.
package sqlitetest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
)

// template is an empty, migrated database, made once per test binary:
// copying it costs a third of migrating a new file under the race detector.
var template struct {
	once sync.Once
	db   []byte
	err  error
}

// Path returns the path of a new empty database in t's temporary directory.
func Path(t testing.TB) string {
	t.Helper()
	template.once.Do(func() {
		dir, err := os.MkdirTemp("", "sqlitetest-")
		if err != nil {
			template.err = err
			return
		}
		defer os.RemoveAll(dir)
		st, err := sqlite.Open(context.Background(), dir+"/t.db", clock.NewVirtual(time.Unix(0, 0)))
		if err != nil {
			template.err = err
			return
		}
		if template.err = st.Close(); template.err == nil {
			template.db, template.err = os.ReadFile(dir + "/t.db")
		}
	})
	if template.err != nil {
		t.Fatal(template.err)
	}
	path := t.TempDir() + "/bullpen.db"
	if err := os.WriteFile(path, template.db, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Open opens a new, empty store on clk for the test and closes it when the
// test ends; the queues are on the same store.
func Open(t testing.TB, clk domain.Clock) (*sqlite.Store, *sqlite.Queue) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), Path(t), clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, st.Queue(sqlite.QueueOptions{})
}
