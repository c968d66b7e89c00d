// Package testworld is the world the control plane's loops are tested in:
// a virtual clock, a new SQLite store and its queues, simulated clouds on
// that clock and a log that goes nowhere, with helpers that read and write
// it (failing the test when the store does) and run loops on its clock. The
// loops' own fixtures build on it, so each sets up only what is its own.
package testworld

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/loop/looptest"
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

// Run runs loops on the world's clock until the stop it returns is called;
// stop waits for them to end and fails the test if they ended in error.
func (w *World) Run(loops ...loop.Loop) (stop func()) {
	ctx, cancel := context.WithCancel(w.Ctx)
	done := make(chan error, 1)
	go func() { done <- looptest.Run(ctx, w.Clock, loops...) }()
	return func() {
		w.T.Helper()
		cancel()
		if err := <-done; err != nil {
			w.T.Fatalf("run: %v", err)
		}
	}
}

// Job returns a recorded job.
func (w *World) Job(id int64) domain.Job {
	w.T.Helper()
	return must[domain.Job](w, "job %d", id)(w.Store.GetJob(w.Ctx, id))
}

// CreateInstance records a row, defaulting the fields in leaves unset: cloud
// id "i-"+ID, a hot member of runner class "small", and, unless its state is
// terminal, a deadline an hour away. It returns the row as recorded.
func (w *World) CreateInstance(in domain.Instance) domain.Instance {
	w.T.Helper()
	if in.CloudID == "" {
		in.CloudID = "i-" + in.ID
	}
	if in.Role == "" {
		in.Role = domain.RoleHot
	}
	if in.Runner == "" {
		in.Runner = "small"
	}
	if in.Deadline.IsZero() && !in.State.Terminal() {
		in.Deadline = w.Clock.Now().Add(time.Hour)
	}
	if err := w.Store.CreateInstances(w.Ctx, []domain.Instance{in}); err != nil {
		w.T.Fatalf("create instance %s: %v", in.ID, err)
	}
	return w.Instance(in.ID)
}

// CreateJob records j as it is and returns it as recorded.
func (w *World) CreateJob(j domain.Job) domain.Job {
	w.T.Helper()
	if _, err := w.Store.CreateJobs(w.Ctx, []domain.Job{j}); err != nil {
		w.T.Fatalf("create job %d: %v", j.ID, err)
	}
	return w.Job(j.ID)
}

// Instance returns a recorded instance.
func (w *World) Instance(id string) domain.Instance {
	w.T.Helper()
	return must[domain.Instance](w, "instance %s", id)(w.Store.GetInstance(w.Ctx, id))
}

// WantUnchanged fails unless the row is as it was: the same version, state
// and job.
func (w *World) WantUnchanged(before domain.Instance) {
	w.T.Helper()
	after := w.Instance(before.ID)
	if after.Version != before.Version || after.State != before.State || after.Job != before.Job {
		w.T.Fatalf("%s changed: %s/%q v%d → %s/%q v%d", before.ID,
			before.State, before.Job, before.Version, after.State, after.Job, after.Version)
	}
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
// visible there; each look counts as a receive of each message.
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

// ResourcePool returns the entries visible in a runner class's resource
// pool queue, and leaves them there.
func (w *World) ResourcePool(class string) []domain.ResourcePoolEntry {
	w.T.Helper()
	msgs := w.Peek(domain.ResourcePoolQueue(class), 10)
	out := make([]domain.ResourcePoolEntry, len(msgs))
	for i, m := range msgs {
		if err := json.Unmarshal(m.Body, &out[i]); err != nil {
			w.T.Fatalf("entry %s of class %s: %v", m.ID, class, err)
		}
	}
	return out
}
