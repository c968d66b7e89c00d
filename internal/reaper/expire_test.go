package reaper

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/loop/looptest"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

func TestRunTerminatesRowsPastTheirDeadline(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewVirtual(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	st, _ := sqlitetest.Open(t, clk)
	cloud := sim.New(clk, sim.Options{})
	defer cloud.Close()
	soon, later := clk.Now().Add(time.Minute), clk.Now().Add(time.Hour)
	rows := []domain.Instance{
		{ID: "stuck-claim", State: domain.StateClaimed, Job: "1", Deadline: soon},
		{ID: "late-release", State: domain.StateReleasing, Deadline: soon},
		{ID: "errored", State: domain.StateError, Job: "2", Deadline: soon},
		{ID: "started-claim", State: domain.StateClaimed, Job: "3", JobStarted: true, Deadline: soon},
		{ID: "long-job", State: domain.StateRunning, Job: "4", JobStarted: true, Deadline: soon},
		{ID: "fresh", State: domain.StateReady, Deadline: later},
	}
	if err := st.CreateInstances(ctx, rows); err != nil {
		t.Fatal(err)
	}
	term := &Terminator{Store: st, Queue: st.Queue(sqlite.QueueOptions{}), Cloud: cloud, Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Interval: time.Minute}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- looptest.Run(runCtx, clk, term.Loop()) }()
	clk.BlockUntil(1) // the first sweep ran; nothing was due
	clk.Advance(time.Minute)
	clk.BlockUntil(1) // the second sweep ran
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := map[string]domain.State{
		"stuck-claim": domain.StateTerminated, "late-release": domain.StateTerminated, "errored": domain.StateTerminated,
		"started-claim": domain.StateClaimed, "long-job": domain.StateTerminated, "fresh": domain.StateReady,
	}
	for id, state := range want {
		if in, _ := st.GetInstance(ctx, id); in.State != state {
			t.Errorf("%s is %s, want %s", id, in.State, state)
		}
	}
}

// An instance bound to a job it has not started, expiring at its deadline,
// is terminated and its job goes back to its queue in the same change:
// never left assigned to a terminated instance.
func TestExpireSendsAnUnstartedJobBackToItsQueue(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewVirtual(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	st, _ := sqlitetest.Open(t, clk)
	q := st.Queue(sqlite.QueueOptions{})
	if err := st.CreateInstances(ctx, []domain.Instance{
		{ID: "bp-1", CloudID: "i-1", State: domain.StateClaimed, Job: "7", RunnerName: "bp-1-7", Deadline: clk.Now().Add(time.Minute)},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateJobs(ctx, []domain.Job{{ID: 7, Status: domain.JobAssigned, Route: domain.RouteLaunch,
		InstanceID: "bp-1", RunnerName: "bp-1-7", Attempts: 1}}); err != nil {
		t.Fatal(err)
	}
	term := &Terminator{Store: st, Queue: q, Clock: clk, Log: slog.New(slog.DiscardHandler)}
	clk.Advance(time.Minute)
	if n, err := term.Expire(ctx); err != nil || n != 1 {
		t.Fatalf("expire: %d marked, %v; want 1", n, err)
	}
	in, _ := st.GetInstance(ctx, "bp-1")
	j, _ := st.GetJob(ctx, 7)
	if in.State != domain.StateTerminating || in.Job != "" {
		t.Fatalf("instance %s bound to %q, want terminating, unbound", in.State, in.Job)
	}
	if j.Status != domain.JobQueued || j.InstanceID != "" || j.Attempts != 2 || j.SendPending {
		t.Fatalf("job %s on %q attempt %d pending %t, want queued again, its message sent", j.Status, j.InstanceID, j.Attempts, j.SendPending)
	}
	clk.Advance(domain.MaxQueueDelay)
	if msgs, err := q.Receive(ctx, domain.QueueLaunch, 10, time.Minute, 0); err != nil || len(msgs) != 1 {
		t.Fatalf("launch queue: %d messages, %v; want the job once", len(msgs), err)
	}
}
