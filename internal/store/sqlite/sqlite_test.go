package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/storetest"
)

var epoch = time.Date(2025, 5, 31, 12, 0, 0, 0, time.UTC)

func tempPath(t *testing.T) string { return filepath.Join(t.TempDir(), "bullpen.db") }

func openAt(t *testing.T, path string, clk domain.Clock) *Store {
	t.Helper()
	s, err := Open(t.Context(), path, clk)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *clock.Virtual) domain.Store {
		return openAt(t, tempPath(t), clk)
	})
}

func TestConnectionsAreConfigured(t *testing.T) {
	s := openAt(t, tempPath(t), clock.NewVirtual(epoch))
	cases := []struct {
		db     *sql.DB
		pragma string
		want   string
	}{
		{s.writer, "journal_mode", "wal"},
		{s.writer, "busy_timeout", "5000"},
		{s.writer, "foreign_keys", "1"},
		{s.writer, "synchronous", "1"}, // NORMAL
		{s.readers, "busy_timeout", "5000"},
		{s.readers, "query_only", "1"},
	}
	for _, c := range cases {
		var got string
		if err := c.db.QueryRowContext(t.Context(), "PRAGMA "+c.pragma).Scan(&got); err != nil {
			t.Fatalf("pragma %s: %v", c.pragma, err)
		}
		if got != c.want {
			t.Errorf("pragma %s = %s, want %s", c.pragma, got, c.want)
		}
	}
	if n := s.writer.Stats().MaxOpenConnections; n != 1 {
		t.Errorf("writer allows %d connections, want 1", n)
	}
}

func TestOpenRefusesWhatItCannotServe(t *testing.T) {
	cases := []struct {
		name string
		path string
		clk  domain.Clock
	}{
		{"empty path", "", clock.NewVirtual(epoch)},
		{"in-memory database", ":memory:", clock.NewVirtual(epoch)},
		{"URI instead of a path", "file:x.db?mode=rwc", clock.NewVirtual(epoch)},
		{"no clock", filepath.Join(t.TempDir(), "x.db"), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if s, err := Open(t.Context(), c.path, c.clk); err == nil {
				s.Close()
				t.Fatal("open succeeded")
			}
		})
	}
}

func TestDataSurvivesReopen(t *testing.T) {
	path, clk := tempPath(t), clock.NewVirtual(epoch.Add(123456789))
	s := openAt(t, path, clk)
	in := domain.Instance{ID: "a", State: domain.StateReady, Pool: "linux", Deadline: epoch.Add(90 * time.Second)}
	if err := s.CreateInstances(t.Context(), []domain.Instance{in}); err != nil {
		t.Fatal(err)
	}
	want, err := s.Transition(t.Context(), "a", domain.Guard{State: domain.StateReady}, func(i *domain.Instance) {
		i.State, i.Job = domain.StateClaimed, "job-1"
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AcquireLease(t.Context(), "converger", "me", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, path, clk)
	got, err := s.GetInstance(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("after reopen: got %+v, want %+v", got, want)
	}
	if l, ok, err := s.AcquireLease(t.Context(), "converger", "other", time.Minute); err != nil || ok || l.Holder != "me" {
		t.Fatalf("lease after reopen: %+v %v %v", l, ok, err)
	}
}

func TestConcurrentWritersNeverSeeLocked(t *testing.T) {
	// Within one process the single writer connection queues every write,
	// so nothing waits on SQLite's lock. Two stores on one file stand for
	// two processes, which the busy timeout has to reconcile; that case is
	// kept light because SQLite's lock waits are not fair.
	cases := []struct {
		name               string
		stores, goroutines int
		rounds             int
	}{
		{"one store, many goroutines", 1, 32, 10},
		{"two stores on one file", 2, 4, 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path, clk := tempPath(t), clock.NewVirtual(epoch)
			var wg sync.WaitGroup
			errs := make(chan error, c.stores*c.goroutines)
			for si := range c.stores {
				s := openAt(t, path, clk)
				for g := range c.goroutines {
					wg.Go(func() { errs <- churn(t, s, fmt.Sprintf("s%d-g%d", si, g), c.rounds) })
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// churn creates one instance and flips it between ready and claimed, reading
// in between, as a busy claim worker would.
func churn(t *testing.T, s *Store, id string, rounds int) error {
	ctx := t.Context()
	if err := s.CreateInstances(ctx, []domain.Instance{{ID: id, State: domain.StateReady}}); err != nil {
		return err
	}
	for r := range rounds {
		job := fmt.Sprintf("job-%d", r)
		if _, err := s.Transition(ctx, id, domain.Guard{State: domain.StateReady}, func(i *domain.Instance) {
			i.State, i.Job = domain.StateClaimed, job
		}); err != nil {
			return err
		}
		if _, err := s.ListInstances(ctx, domain.InstanceFilter{States: []domain.State{domain.StateClaimed}}); err != nil {
			return err
		}
		if _, err := s.Transition(ctx, id, domain.Guard{State: domain.StateClaimed, Job: job}, func(i *domain.Instance) {
			i.State, i.Job = domain.StateReady, ""
		}); err != nil {
			return err
		}
	}
	return nil
}

func TestPanicInApplyLeavesStoreUsable(t *testing.T) {
	s := openAt(t, tempPath(t), clock.NewVirtual(epoch))
	if err := s.CreateInstances(t.Context(), []domain.Instance{{ID: "a", State: domain.StateReady}}); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		s.Transition(t.Context(), "a", domain.Guard{State: domain.StateReady}, func(*domain.Instance) { panic("boom") })
	}()
	// The single writer connection must be back in the pool, not stuck in
	// a transaction.
	got, err := s.Transition(t.Context(), "a", domain.Guard{State: domain.StateReady}, func(i *domain.Instance) {
		i.State = domain.StateClaimed
	})
	if err != nil || got.Version != 2 {
		t.Fatalf("after panic: %+v, %v", got, err)
	}
}

func TestTimesOutsideStorableRangeRefused(t *testing.T) {
	s := openAt(t, tempPath(t), clock.NewVirtual(epoch))
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	secret := "jit-SECRET"
	err := s.CreateInstances(t.Context(), []domain.Instance{{ID: "a", State: domain.StateReady, Deadline: far, RunnerConfig: secret}})
	if err == nil || !strings.Contains(err.Error(), "deadline") || strings.Contains(err.Error(), secret) {
		t.Fatalf("create with year 10000 deadline: %v", err)
	}
	if err := s.CreateInstances(t.Context(), []domain.Instance{{ID: "b", State: domain.StateReady, RunnerConfig: secret}}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Transition(t.Context(), "b", domain.Guard{State: domain.StateReady}, func(i *domain.Instance) { i.Deadline = far })
	if err == nil || errors.Is(err, domain.ErrConflict) || strings.Contains(err.Error(), secret) {
		t.Fatalf("transition to year 10000 deadline: %v", err)
	}
}

func TestJobTimesOutsideStorableRangeRefused(t *testing.T) {
	s := openAt(t, tempPath(t), clock.NewVirtual(epoch))
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err := s.CreateJobs(t.Context(), []domain.Job{{ID: 1, Status: domain.JobQueued, CompletedAt: far}})
	if err == nil || !strings.Contains(err.Error(), "completed_at") {
		t.Fatalf("create with year 10000 completion: %v", err)
	}
	if _, err := s.CreateJobs(t.Context(), []domain.Job{{ID: 2, Status: domain.JobQueued}}); err != nil {
		t.Fatal(err)
	}
	_, err = s.TransitionJob(t.Context(), 2, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) { j.AssignedAt = far })
	if err == nil || errors.Is(err, domain.ErrConflict) {
		t.Fatalf("transition to year 10000 assignment: %v", err)
	}
	if err := s.RecordHeartbeat(t.Context(), "x", far); err == nil {
		t.Fatal("heartbeat in year 10000 accepted")
	}
}
