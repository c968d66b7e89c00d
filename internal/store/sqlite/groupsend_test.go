package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// While another process holds the database's write lock, senders give up
// when their contexts end (the webhook answers GitHub in time), not after
// the busy timeout for each group ahead of them; their messages are written
// once the lock goes.
func TestSendersGiveUpWithTheirContextsWhileTheStoreIsLocked(t *testing.T) {
	path := tempPath(t)
	s := openAt(t, path, clock.NewVirtual(epoch))
	q := s.Queue(QueueOptions{})
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lock, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(t.Context(), "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}

	const senders = 5
	errs := make(chan error, senders)
	for i := range senders {
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			errs <- q.Send(ctx, "q", []domain.SendRequest{{Body: []byte{byte('a' + i)}}})
		}()
	}
	// Each would otherwise wait out the busy timeout, for its own group and
	// the one ahead: far longer than this guard.
	guard := time.After(BusyTimeout - time.Second)
	for range senders {
		select {
		case err := <-errs:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a send under a held lock: %v, want its context's deadline", err)
			}
		case <-guard:
			t.Fatal("a sender waited past its context for the store's lock")
		}
	}

	if _, err := lock.ExecContext(t.Context(), "COMMIT"); err != nil {
		t.Fatal(err)
	}
	// A later send is committed after the ones that gave up: once it is, so
	// are they.
	if err := q.Send(t.Context(), "q", []domain.SendRequest{{Body: []byte("z")}}); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(t.Context(), "q"); err != nil || st.Visible != senders+1 {
		t.Fatalf("after the lock: %+v, %v; want every message written", st, err)
	}
}
