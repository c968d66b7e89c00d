package provision

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/loop/looptest"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// announcing is a log handler that writes to a buffer and closes seen once
// a record with message msg was written.
type announcing struct {
	slog.Handler
	msg  string
	seen chan struct{}
	once *sync.Once
}

func (h announcing) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Message == h.msg {
		h.once.Do(func() { close(h.seen) })
	}
	return err
}

func (h announcing) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

func (h announcing) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}

const stoppingMsg = "stopping: waiting for the machines in hand to register their runners"

// stopping runs the provision loop with agents that never register on
// their own, until n machines were woken, then stops it. It returns the
// woken machines, the log, once the loop said in it what it waits for, and
// a channel that receives what the loop returned.
func stopping(t *testing.T, n int, edit func(*Options)) (*fixture, []string, *testlog.Buffer, <-chan error) {
	t.Helper()
	buf := &testlog.Buffer{}
	said := make(chan struct{})
	f := newFixture(t, withOptions(edit), func(_ *fixture, d *Deps, _ *Options) {
		d.Log = slog.New(announcing{Handler: slog.NewTextHandler(buf, nil), msg: stoppingMsg, seen: said, once: &sync.Once{}})
	})
	woken := make(chan string, n)
	f.setAgent(func(_ *fixture, cloudID string) { woken <- cloudID })
	f.queueJobs(small, 100, n)
	ctx, cancel := context.WithCancel(f.Ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- looptest.Run(ctx, f.Clock, f.p.Loop()) }()
	var ids []string
	for range n {
		ids = append(ids, <-woken)
	}
	cancel()
	select {
	case <-said:
	case <-time.After(10 * time.Second): // a watchdog, not a wait for something
		t.Fatalf("the stopping loop did not say what it waits for; log:\n%s", buf)
	}
	return f, ids, buf, stopped
}

// returned waits for the loop's end, failing if it does not come: a loop
// whose waits are not cut short would wait for its clock forever.
func returned(t *testing.T, stopped <-chan error) {
	t.Helper()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // a watchdog, not a wait for something
		t.Fatal("the loop did not return")
	}
}

func TestAStoppingLoopSaysWhichMachinesItWaitsForAndServesThem(t *testing.T) {
	f, ids, buf, stopped := stopping(t, 2, func(*Options) {})
	if got := buf.Lines("level=INFO", stoppingMsg, "new_machines=2", "reused_machines=0", "batches=1", "up_to=5m0s"); len(got) != 1 {
		t.Fatalf("want one INFO line naming the 2 new machines and the creation timeout; log:\n%s", buf)
	}
	for _, id := range ids {
		f.register(id) // after the stop: the loop still waits for them
	}
	returned(t, stopped)
	for _, id := range []int64{100, 101} {
		if j := f.Job(id); j.Status != domain.JobAssigned || j.Via != domain.ViaCold {
			t.Fatalf("job %d: %s via %q (%s)", id, j.Status, j.Via, j.Reason)
		}
	}
	if got := buf.Lines(stoppingMsg); len(got) != 1 {
		t.Fatalf("said %d times what it waits for, want once", len(got))
	}
}

func TestAStoppingLoopWaitsNoLongerThanStopWait(t *testing.T) {
	f, _, buf, stopped := stopping(t, 2, func(o *Options) { o.StopWait = 30 * time.Second })
	if got := buf.Lines(stoppingMsg, "new_machines=2", "up_to=30s"); len(got) != 1 {
		t.Fatalf("want the wait bounded by StopWait in the log; log:\n%s", buf)
	}
	f.Clock.Advance(30 * time.Second)
	returned(t, stopped)
	for _, id := range []int64{100, 101} {
		if j := f.Job(id); j.Status != domain.JobQueued || j.InstanceID != "" {
			t.Fatalf("job %d: %s on %q, want it requeued", id, j.Status, j.InstanceID)
		}
	}
	if counter(t, f.p.metrics.jobs, outcomeRequeued) != 2 {
		t.Fatal("the 2 jobs are not counted requeued")
	}
	for _, in := range f.Instances(domain.InstanceFilter{}) {
		if in.State != domain.StateTerminating && in.State != domain.StateTerminated {
			t.Fatalf("instance %s is %s: a machine whose wait was cut short must be let go", in.ID, in.State)
		}
	}
	if got := buf.Lines("level=INFO", "stopped waiting for machines to register", "machines=2"); len(got) != 1 {
		t.Fatalf("want one INFO line saying 2 waits were cut short; log:\n%s", buf)
	}
	if strings.Contains(buf.String(), "level=WARN") {
		t.Fatalf("a wait cut short by the stop is no fault; log:\n%s", buf)
	}
}

func TestAnIdleLoopStopsSilently(t *testing.T) {
	buf := &testlog.Buffer{}
	f := newFixture(t, withLog(buf))
	ctx, cancel := context.WithCancel(f.Ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- looptest.Run(ctx, f.Clock, f.p.Loop()) }()
	cancel()
	returned(t, stopped)
	if got := buf.Lines(stoppingMsg); len(got) != 0 {
		t.Fatalf("a loop with nothing in hand said %q", got)
	}
}
