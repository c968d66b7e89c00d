package agents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

// fixture is an agents.Service on a real SQLite store and queue, driven by a
// virtual clock. Every instance it creates gets cloud id "i-" + its id.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	clk    *clock.Virtual
	store  *sqlite.Store
	queue  *sqlite.Queue
	svc    *agents.Service
	policy agents.Policy // returned for every instance

	mu       sync.Mutex
	notified []string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	// Each fixture has its own database and clock, and opening a database
	// is most of a test's time under the race detector.
	t.Parallel()
	f := &fixture{t: t, ctx: context.Background(), clk: clock.NewVirtual(t0)}
	f.store, f.queue = sqlitetest.Open(t, f.clk)
	st := f.store
	var err error
	f.svc, err = agents.New(st, f.queue, f.clk, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, agents.Options{
		Policy: func(domain.Instance) agents.Policy { return f.policy }, Notices: f,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Assigned implements domain.AssignmentNotifier.
func (f *fixture) Assigned(cloudID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notified = append(f.notified, cloudID)
}

func (f *fixture) notifications() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.notified...)
}

// instance writes a row, defaulting the fields in leaves unset.
func (f *fixture) instance(in domain.Instance) domain.Instance {
	f.t.Helper()
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
		in.Deadline = f.clk.Now().Add(time.Hour)
	}
	if err := f.store.CreateInstances(f.ctx, []domain.Instance{in}); err != nil {
		f.t.Fatal(err)
	}
	return f.get(in.ID)
}

func (f *fixture) get(id string) domain.Instance {
	f.t.Helper()
	in, err := f.store.GetInstance(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return in
}

// job writes a job; an assigned job gets the name and id of the runner
// registered for it.
func (f *fixture) job(j domain.Job) domain.Job {
	f.t.Helper()
	if j.Status == "" {
		j.Status = domain.JobQueued
	}
	if j.Route == "" {
		j.Route = domain.RouteLaunch
	}
	if j.Status == domain.JobAssigned && j.RunnerName == "" {
		j.RunnerName, j.RunnerID = runnerOf(j.InstanceID, j.ID), 7
	}
	if _, err := f.store.CreateJobs(f.ctx, []domain.Job{j}); err != nil {
		f.t.Fatal(err)
	}
	return f.getJob(j.ID)
}

func (f *fixture) getJob(id int64) domain.Job {
	f.t.Helper()
	j, err := f.store.GetJob(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return j
}

// runnerOf and configOf are the runner registered for instance id when it
// was given job jobID: its name, and its config (a credential, distinct per
// instance so that a test can tell whose runner an agent is told to start).
func runnerOf(id string, jobID int64) string { return fmt.Sprintf("%s-%d", id, jobID) }
func configOf(id string) string              { return "jit-secret-of-" + id }

// bound writes an instance in state st bound to a new assigned job id, with
// the runner registered for it.
func (f *fixture) bound(id string, st domain.State, jobID int64) (domain.Instance, domain.Job) {
	f.t.Helper()
	in := f.instance(domain.Instance{
		ID: id, State: st, Job: domain.JobKey(jobID), CPU: 4, MemoryMiB: 16384,
		RunnerName: runnerOf(id, jobID), RunnerConfig: configOf(id),
	})
	j := f.job(domain.Job{ID: jobID, Status: domain.JobAssigned, InstanceID: id, Labels: []string{"runs-on=1/pool=p"}})
	return in, j
}

func (f *fixture) signal(in domain.Instance, kind domain.SignalKind, job string) error {
	return f.svc.Signal(f.ctx, domain.Signal{CloudID: in.CloudID, Kind: kind, Job: job, At: f.clk.Now()})
}

// resourcePool receives every visible entry of a runner class's queue.
func (f *fixture) resourcePool(class string) []domain.ResourcePoolEntry {
	f.t.Helper()
	msgs, err := f.queue.Receive(f.ctx, domain.ResourcePoolQueue(class), 10, time.Minute, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	out := make([]domain.ResourcePoolEntry, len(msgs))
	for i, m := range msgs {
		if err := json.Unmarshal(m.Body, &out[i]); err != nil {
			f.t.Fatal(err)
		}
	}
	return out
}

// queued counts a queue's waiting messages, visible and delayed.
func (f *fixture) queued(queue string) (visible, delayed int) {
	f.t.Helper()
	st, err := f.queue.Stats(f.ctx, queue)
	if err != nil {
		f.t.Fatal(err)
	}
	return st.Visible, st.Delayed
}

// wantNoRunner fails unless the instance holds no runner registration: a
// just-in-time runner serves one job, and its config is a credential.
func (f *fixture) wantNoRunner(id string) {
	f.t.Helper()
	if in := f.get(id); in.RunnerName != "" || in.RunnerConfig != "" {
		f.t.Fatalf("%s (%s) keeps runner %q (config set: %t), want none", id, in.State, in.RunnerName, in.RunnerConfig != "")
	}
}

// wantUnchanged fails unless the row is exactly as before (same version).
func (f *fixture) wantUnchanged(before domain.Instance) {
	f.t.Helper()
	if after := f.get(before.ID); after.Version != before.Version || after.State != before.State || after.Job != before.Job {
		f.t.Fatalf("instance changed: before %s/%q v%d, after %s/%q v%d",
			before.State, before.Job, before.Version, after.State, after.Job, after.Version)
	}
}

func wantRejected(t *testing.T, err error) {
	t.Helper()
	var re *agents.RejectedError
	if !errors.As(err, &re) || !errors.Is(err, domain.ErrRejected) {
		t.Fatalf("want a *RejectedError wrapping ErrRejected, got %v", err)
	}
}

// agentsPolicy is a pool's after-job policy without limits.
func agentsPolicy(reuse bool, idle time.Duration) agents.Policy {
	return agents.Policy{Reuse: reuse, IdleLifetime: idle}
}
