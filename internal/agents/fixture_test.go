package agents_test

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/promtest"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

// fixture is an agents.Service in a test world, which records the cloud
// ids the service gives notice to.
type fixture struct {
	*testworld.World
	svc    *agents.Service
	policy agents.Policy // returned for every instance
	reg    *prometheus.Registry

	mu       sync.Mutex
	notified []string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureLogging(t, nil)
}

// newFixtureLogging is newFixture with the service logging to log (nil
// discards).
func newFixtureLogging(t *testing.T, log *slog.Logger) *fixture {
	t.Helper()
	// Each fixture has its own database and clock, and opening a database
	// is most of a test's time under the race detector.
	t.Parallel()
	f := &fixture{World: testworld.New(t, t0), reg: prometheus.NewRegistry()}
	if log != nil {
		f.Log = log
	}
	var err error
	f.svc, err = agents.New(f.Store, f.Queue, f.Clock, f.Log, f.reg, agents.Options{
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

// instancesFailed is the service's count of instances a failure took out
// of service.
func (f *fixture) instancesFailed() float64 {
	f.T.Helper()
	return promtest.MustValue(f.T, f.reg, "bullpen_instances_failed_total")
}

func (f *fixture) notifications() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.notified...)
}

// createJob records a job, queued for the launch queue unless j says
// otherwise; an assigned job gets the name and id of the runner registered
// for it.
func (f *fixture) createJob(j domain.Job) domain.Job {
	f.T.Helper()
	if j.Status == "" {
		j.Status = domain.JobQueued
	}
	if j.Route == "" {
		j.Route = domain.RouteLaunch
	}
	if j.Status == domain.JobAssigned && j.RunnerName == "" {
		j.RunnerName, j.RunnerID = runnerOf(j.InstanceID, j.ID), 7
	}
	return f.CreateJob(j)
}

// runnerOf and configOf are the runner registered for instance id when it
// was given job jobID: its name, and its config (a credential, distinct per
// instance so that a test can tell whose runner an agent is told to start).
func runnerOf(id string, jobID int64) string { return fmt.Sprintf("%s-%d", id, jobID) }
func configOf(id string) string              { return "jit-secret-of-" + id }

// bound writes an instance in state st bound to a new assigned job id, with
// the runner registered for it.
func (f *fixture) bound(id string, st domain.State, jobID int64) (domain.Instance, domain.Job) {
	f.T.Helper()
	in := f.CreateInstance(domain.Instance{
		ID: id, State: st, Job: domain.JobKey(jobID), CPU: 4, MemoryMiB: 16384,
		RunnerName: runnerOf(id, jobID), RunnerConfig: configOf(id),
	})
	j := f.createJob(domain.Job{ID: jobID, Status: domain.JobAssigned, InstanceID: id, Labels: []string{"runs-on=1/pool=p"}})
	return in, j
}

func (f *fixture) signal(in domain.Instance, kind domain.SignalKind, job string) error {
	return f.svc.Signal(f.Ctx, domain.Signal{CloudID: in.CloudID, Kind: kind, Job: job, At: f.Clock.Now()})
}

// queued counts a queue's waiting messages, visible and delayed.
func (f *fixture) queued(queue string) (visible, delayed int) {
	f.T.Helper()
	st := f.Stats(queue)
	return st.Visible, st.Delayed
}

// wantNoRunner fails unless the instance holds no runner registration: a
// just-in-time runner serves one job, and its config is a credential.
func (f *fixture) wantNoRunner(id string) {
	f.T.Helper()
	if in := f.Instance(id); in.RunnerName != "" || in.RunnerConfig != "" {
		f.T.Fatalf("%s (%s) keeps runner %q (config set: %t), want none", id, in.State, in.RunnerName, in.RunnerConfig != "")
	}
}

// wantToldToRun fails unless Next tells in's agent to run job jobID with
// runner, under in's own config.
func (f *fixture) wantToldToRun(in domain.Instance, jobID int64, runner string) {
	f.T.Helper()
	got, err := f.svc.Next(f.Ctx, in.CloudID)
	if err != nil {
		f.T.Fatal(err)
	}
	a := got.Assignment
	if got.Kind != domain.InstructionRun || a.JobID != jobID || a.RunnerName != runner || a.JITConfig != configOf(in.ID) {
		f.T.Fatalf("%s told %s job %d runner %q (own config: %t), want run job %d on runner %q",
			in.ID, got.Kind, a.JobID, a.RunnerName, a.JITConfig == configOf(in.ID), jobID, runner)
	}
}

// wantDefaultDeadline fails unless in is due its state's default deadline
// from now.
func (f *fixture) wantDefaultDeadline(in domain.Instance) {
	f.T.Helper()
	if want := f.Clock.Now().Add(domain.DefaultDeadlines().For(in.State)); !in.Deadline.Equal(want) {
		f.T.Fatalf("%s deadline %s, want %s", in.State, in.Deadline, want)
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
