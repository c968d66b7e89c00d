// Package testworld is the world the control plane's loops are tested in:
// a virtual clock, a new SQLite store and its queues, simulated clouds on
// that clock and a log that goes nowhere, with helpers that read and write
// it and fail the test when the store does. The loops' own fixtures build
// on it, so each sets up only what is its own.
package testworld

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

// World is one test's store, queues and clock.
type World struct {
	T     testing.TB
	Ctx   context.Context
	Clock *clock.Virtual
	Store *sqlite.Store
	Queue *sqlite.Queue
	// Log discards everything: tests that look at logs bring their own.
	Log *slog.Logger
}

// New returns a world whose clock starts at start, on a new, empty store
// closed when the test ends.
func New(t testing.TB, start time.Time) *World {
	t.Helper()
	w := &World{T: t, Ctx: context.Background(), Clock: clock.NewVirtual(start), Log: slog.New(slog.DiscardHandler)}
	w.Store, w.Queue = sqlitetest.Open(t, w.Clock)
	return w
}

// Scope is where the runners of the world's jobs register.
func Scope(domain.Job) domain.Scope { return domain.Scope{Owner: "acme", Repo: "app"} }

// NewCloud returns a simulated cloud on the world's clock, closed when the
// test ends.
func (w *World) NewCloud(o sim.Options) *sim.Cloud {
	c := sim.New(w.Clock, o)
	w.T.Cleanup(c.Close)
	return c
}

// Job returns a recorded job.
func (w *World) Job(id int64) domain.Job {
	w.T.Helper()
	return must[domain.Job](w, "job %d", id)(w.Store.GetJob(w.Ctx, id))
}

// Instance returns a recorded instance.
func (w *World) Instance(id string) domain.Instance {
	w.T.Helper()
	return must[domain.Instance](w, "instance %s", id)(w.Store.GetInstance(w.Ctx, id))
}

// Instances returns the recorded instances filter selects.
func (w *World) Instances(filter domain.InstanceFilter) []domain.Instance {
	w.T.Helper()
	return must[[]domain.Instance](w, "instances %+v", filter)(w.Store.ListInstances(w.Ctx, filter))
}

// Stats counts a queue's messages in every state.
func (w *World) Stats(queue string) domain.QueueStats {
	w.T.Helper()
	return must[domain.QueueStats](w, "stats of %s", queue)(w.Queue.Stats(w.Ctx, queue))
}

// must returns what a call returned, failing the test, with what the call
// was for, when it failed.
func must[T any](w *World, format string, args ...any) func(T, error) T {
	return func(v T, err error) T {
		w.T.Helper()
		if err != nil {
			w.T.Fatalf(format+": %v", append(args, err)...)
		}
		return v
	}
}

// Enqueue records js and sends them to queue, as the intake does.
func (w *World) Enqueue(queue string, js []domain.Job) []domain.Job {
	w.T.Helper()
	sends := make([]domain.SendRequest, len(js))
	for i, j := range js {
		sends[i] = jobs.SendRequest(j, 0)
	}
	if _, err := w.Store.CreateJobs(w.Ctx, js); err != nil {
		w.T.Fatalf("create jobs: %v", err)
	}
	if err := w.Queue.Send(w.Ctx, queue, sends); err != nil {
		w.T.Fatalf("send to %s: %v", queue, err)
	}
	return js
}

// Peek returns the messages visible in queue, at most max, and leaves them
// visible there.
func (w *World) Peek(queue string, max int) []domain.Message {
	w.T.Helper()
	msgs, err := w.Queue.Receive(w.Ctx, queue, max, time.Minute, 0)
	if err != nil {
		w.T.Fatalf("receive from %s: %v", queue, err)
	}
	for _, m := range msgs {
		if err := w.Queue.ChangeVisibility(w.Ctx, queue, m.Receipt, 0); err != nil {
			w.T.Fatalf("put back %s in %s: %v", m.ID, queue, err)
		}
	}
	return msgs
}
