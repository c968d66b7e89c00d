package provision

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

func (f *fixture) runners() []domain.GitHubRunner {
	f.T.Helper()
	rs, err := f.gh.ListRunners(f.Ctx, domain.Scope{Owner: "acme", Repo: "app"})
	if err != nil {
		f.T.Fatal(err)
	}
	return rs
}

// wantRequeued checks that job id went back to the launch queue unbound,
// once, with why in its reason.
func (f *fixture) wantRequeued(id int64, why string) {
	f.T.Helper()
	j := f.Job(id)
	if j.Status != domain.JobQueued || j.InstanceID != "" || j.RunnerName != "" || j.RunnerID != 0 || j.Via != "" ||
		j.Attempts != 1 || !strings.Contains(j.Reason, why) {
		f.T.Fatalf("job %d: %s on %q via %q runner %q, attempts %d, reason %q; want requeued for %q",
			id, j.Status, j.InstanceID, j.Via, j.RunnerName, j.Attempts, j.Reason, why)
	}
}

// wantRunner checks that instance id holds the runner registered for job j:
// its agent starts that runner, whichever job GitHub then gives it.
func (f *fixture) wantRunner(id string, j domain.Job) {
	f.T.Helper()
	in := f.Instance(id)
	if in.RunnerName == "" || in.RunnerName != j.RunnerName || in.RunnerConfig == "" {
		f.T.Fatalf("instance %s holds runner %q (config set: %t), want job %d's %q with its config",
			id, in.RunnerName, in.RunnerConfig != "", j.ID, j.RunnerName)
	}
}

// wantNoRunner checks that instance id, given back, holds no registration.
func (f *fixture) wantNoRunner(id string) {
	f.T.Helper()
	if in := f.Instance(id); in.RunnerName != "" || in.RunnerConfig != "" {
		f.T.Fatalf("instance %s (%s) keeps runner %q (config set: %t), want none", id, in.State, in.RunnerName, in.RunnerConfig != "")
	}
}

// wantGivenBack checks that the claim of instance in for job id was undone
// whole: the instance ready again, without a runner, back in its resource
// pool; the job requeued for why; no runner left registered and no fleet
// launched instead. It returns the instance.
func (f *fixture) wantGivenBack(in domain.Instance, id int64, why string) domain.Instance {
	f.T.Helper()
	back := f.wantState(in.ID, domain.StateReady)
	f.wantNoRunner(in.ID)
	if got := f.poolEntries(in.Runner); !slices.Equal(got, []string{in.ID}) {
		f.T.Fatalf("resource pool holds %v, want instance %s back", got, in.ID)
	}
	f.wantRequeued(id, why)
	if rs := f.runners(); len(rs) != 0 {
		f.T.Fatalf("runner registrations left: %+v", rs)
	}
	if n := f.cloud.Calls()["CreateFleet"]; n != 0 {
		f.T.Fatalf("%d fleets launched for the job", n)
	}
	return back
}

func TestRollbackWhenGitHubRefusesTheRunner(t *testing.T) {
	f := newFixture(t)
	in := f.reusable(small, 1, func(in *domain.Instance) { in.Deadline = t0.Add(3 * time.Minute) })[0]
	f.gh.FailNext(ghsim.OpRegisterRunner, 1, nil)
	f.queueJobs(small, 100, 1)

	f.serve()

	back := f.wantGivenBack(in, 100, "register runner")
	if back.Job != "" || !back.Deadline.Equal(in.Deadline) {
		t.Fatalf("rolled back instance: job %q deadline %s (was %s)", back.Job, back.Deadline, in.Deadline)
	}
	if st := f.Stats(domain.QueueLaunch); st.Delayed != 1 || st.InFlight != 0 || st.Visible != 0 {
		t.Fatalf("launch queue %+v", st)
	}
	if counter(t, f.p.metrics.postClaim, "rolled_back") != 1 || counter(t, f.p.metrics.jobs, "requeued") != 1 {
		t.Fatal("metrics do not show the rollback")
	}

	// The retry finds the instance again.
	f.Clock.Advance(2 * time.Second)
	f.serve()
	f.wantRunner(in.ID, f.wantJob(100, domain.JobAssigned, domain.ViaReuse, in.ID))
}

// cancelOnWake is an agent whose job is cancelled (the completed webhook
// reaches the agents service) as soon as it is woken with it.
func cancelOnWake(f *fixture, cloudID string) {
	ins, err := f.agents.Next(f.Ctx, cloudID)
	if err != nil {
		f.T.Error(err)
		return
	}
	if err := f.agents.Finish(f.Ctx, ins.Assignment.JobID, "cancelled"); err != nil {
		f.T.Error(err)
	}
}

func TestAJobCancelledBeforeItIsServedIsDropped(t *testing.T) {
	f := newFixture(t)
	in := f.reusable(small, 1, nil)[0]
	f.queueJobs(small, 100, 1)
	if err := f.agents.Finish(f.Ctx, 100, "cancelled"); err != nil {
		t.Fatal(err)
	}
	f.serve()
	if got := f.Instance(in.ID); got.Version != 1 {
		t.Fatalf("instance touched for a cancelled job: %s v%d", got.State, got.Version)
	}
	f.wantNothingLeft()
}

func TestAJobCancelledWhileItsReusedInstanceRegisters(t *testing.T) {
	f := newFixture(t)
	ins := f.reusable(small, 2, nil)
	f.setAgent(cancelOnWake)
	f.queueJobs(small, 100, 1)
	f.serve()
	if j := f.Job(100); j.Status != domain.JobCompleted {
		t.Fatalf("job %s", j.Status)
	}
	f.wantState(ins[0].ID, domain.StateTerminating)
	f.wantNoRunner(ins[0].ID) // released by the job's end
	// The job is gone: no other instance is claimed for it.
	if got := f.Instance(ins[1].ID); got.Version != 1 || got.State != domain.StateReady {
		t.Fatalf("second instance %s v%d: claimed for a cancelled job", got.State, got.Version)
	}
	if got := f.poolEntries("small"); !slices.Equal(got, []string{ins[1].ID}) {
		t.Fatalf("resource pool %v", got)
	}
	f.wantNothingLeft()
	if counter(t, f.p.metrics.jobs, "dropped") != 1 || counter(t, f.p.metrics.jobs, "requeued") != 0 {
		t.Fatal("a cancelled job must count as dropped, not requeued")
	}
}

func TestAJobCancelledWhileItsNewInstanceBoots(t *testing.T) {
	f := newFixture(t)
	f.setAgent(cancelOnWake)
	f.queueJobs(small, 100, 1)
	f.serve()
	if j := f.Job(100); j.Status != domain.JobCompleted {
		t.Fatalf("job %s", j.Status)
	}
	for _, in := range f.Instances(domain.InstanceFilter{Runner: "small"}) {
		if in.State != domain.StateTerminating {
			t.Fatalf("instance %s is %s", in.ID, in.State)
		}
	}
	f.wantNothingLeft()
}

func TestAJobCancelledBetweenSelectionAndCreationGetsNoMachine(t *testing.T) {
	var once sync.Once
	f := newFixture(t, func(f *fixture, d *Deps, _ *Options) {
		d.Queue = onEmptyReceive{Queue: d.Queue, queue: domain.ResourcePoolQueue("small"), hook: func() {
			once.Do(func() {
				if err := f.agents.Finish(f.Ctx, 100, "cancelled"); err != nil {
					f.T.Error(err)
				}
			})
		}}
	})
	f.queueJobs(small, 100, 1)
	f.serve()
	if n := f.cloud.Calls()["CreateFleet"]; n != 0 {
		t.Fatalf("%d fleets for a cancelled job", n)
	}
	f.wantNothingLeft()
}

// wantNothingLeft checks that the launch queue is empty and no runner
// registration was left behind.
func (f *fixture) wantNothingLeft() {
	f.T.Helper()
	if st := f.Stats(domain.QueueLaunch); st != (domain.QueueStats{}) {
		f.T.Fatalf("launch queue %+v", st)
	}
	if rs := f.runners(); len(rs) != 0 {
		f.T.Fatalf("runner registrations left: %+v", rs)
	}
}

// onEmptyReceive calls hook whenever a receive from queue comes back empty.
type onEmptyReceive struct {
	domain.Queue
	queue string
	hook  func()
}

func (q onEmptyReceive) Receive(ctx context.Context, name string, max int, vis, wait time.Duration) ([]domain.Message, error) {
	msgs, err := q.Queue.Receive(ctx, name, max, vis, wait)
	if err == nil && len(msgs) == 0 && name == q.queue {
		q.hook()
	}
	return msgs, err
}

func TestCancellingServeLeavesNothingHalfClaimed(t *testing.T) {
	f := newFixture(t)
	in := f.reusable(small, 1, nil)[0]
	f.setAgent(silent)
	f.queueJobs(small, 100, 1)
	ctx, cancel := context.WithCancel(f.Ctx)
	done := make(chan struct{})
	msgs := f.receive()
	go func() {
		defer close(done)
		f.p.Serve(ctx, msgs)
	}()
	f.Clock.BlockUntil(2)
	cancel()
	<-done

	f.wantGivenBack(in, 100, "stopped")
}

var errBoom = errors.New("boom")

func TestDumpOnPanic(t *testing.T) {
	t.Run("a claimed instance is released", func(t *testing.T) {
		f := newFixture(t)
		in := f.reusable(small, 1, nil)[0]
		f.setAgent(func(*fixture, string) { panic(errBoom) })
		f.queueJobs(small, 100, 1)
		f.serve()
		f.wantGivenBack(in, 100, "boom")
	})
	t.Run("a created instance is terminated, a served job kept", func(t *testing.T) {
		f := newFixture(t)
		reused := f.reusable(small, 1, nil)[0]
		f.setAgent(func(f *fixture, cloudID string) {
			if cloudID != reused.CloudID {
				panic(errBoom)
			}
			registerAtOnce(f, cloudID)
		})
		f.queueJobs(small, 100, 2)
		f.serve()
		served, dumped := f.Job(100), int64(101)
		if served.Via != domain.ViaReuse {
			served, dumped = f.Job(101), 100
		}
		f.wantRunner(reused.ID, f.wantJob(served.ID, domain.JobAssigned, domain.ViaReuse, reused.ID))
		f.wantState(reused.ID, domain.StateRunning)
		f.wantRequeued(dumped, "boom")
		created := f.Instances(domain.InstanceFilter{Runner: "small", States: []domain.State{domain.StateTerminating}})
		if len(created) != 1 || created[0].ID == reused.ID {
			t.Fatalf("terminating %+v, want the new instance", created)
		}
		if counter(t, f.p.metrics.jobs, "reuse") != 1 || counter(t, f.p.metrics.jobs, "requeued") != 1 {
			t.Fatal("metrics do not show one reuse and one requeue")
		}
	})
	t.Run("rows of a fleet call that panicked are closed", func(t *testing.T) {
		var rc *recordingCloud
		f := newFixture(t, withRecordingCloud(&rc))
		rc.onCreate = func(domain.LaunchSpec) { panic("cloud client bug") }
		f.queueJobs(small, 100, 2)
		f.serve()
		for _, in := range f.Instances(domain.InstanceFilter{Runner: "small"}) {
			if in.State != domain.StateTerminating {
				t.Fatalf("row %s left %s", in.ID, in.State)
			}
		}
		f.wantRequeued(100, "cloud client bug")
		f.wantRequeued(101, "cloud client bug")
	})
}

// A reused instance whose job ends while it registers did not fail: it is
// not logged or counted as failing its checks, and one its job's end left
// in service goes back to its resource pool rather than being terminated.
func TestAJobEndingWhileItsReusedInstanceRegistersIsNotTheInstancesFault(t *testing.T) {
	completeOnWake := func(f *fixture, cloudID string) {
		c := f.p.verbs.CompleteJob(f.Job(100), f.Clock.Now(), "cancelled")
		if _, err := f.Store.TransitionJob(f.Ctx, c.ID, c.Guard, c.Apply); err != nil {
			f.T.Error(err)
		}
	}
	for _, tc := range []struct {
		name  string
		agent agentFunc
		back  bool // the instance goes back to its resource pool
	}{
		{"cancelled, its release ending the instance", cancelOnWake, false},
		{"ended without a word to its instance", completeOnWake, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log testlog.Buffer
			f := newFixture(t, withLog(&log))
			in := f.reusable(small, 1, nil)[0]
			f.setAgent(tc.agent)
			f.queueJobs(small, 100, 1)
			done := f.serveAsync(f.p, f.receive())
			if tc.back {
				f.Clock.BlockUntil(2) // the registration wait
				f.Clock.Advance(f.p.opts.RegistrationTimeout)
			}
			<-done

			if strings.Contains(log.String(), "failed its checks") || counter(t, f.p.metrics.postClaim, "failed") != 0 {
				t.Fatalf("the instance counted as failing its checks:\n%s", log.String())
			}
			if !tc.back {
				f.wantState(in.ID, domain.StateTerminating)
				return
			}
			f.wantState(in.ID, domain.StateReady)
			f.wantNoRunner(in.ID)
			if got := f.poolEntries("small"); !slices.Equal(got, []string{in.ID}) {
				t.Fatalf("resource pool %v, want the instance back", got)
			}
			if counter(t, f.p.metrics.postClaim, "rolled_back") != 1 || counter(t, f.p.metrics.jobs, "dropped") != 1 {
				t.Fatal("the instance must count as given back and its job as dropped")
			}
		})
	}
}
