package agents_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/promtest"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// releasing writes an instance in the middle of the release handshake: its
// job cleared, waiting for the agent to deregister until the default
// releasing deadline.
func (f *fixture) releasing(id string) domain.Instance {
	f.T.Helper()
	return f.CreateInstance(domain.Instance{
		ID: id, State: domain.StateReleasing, Runner: "medium", JobsServed: 1,
		InstanceType: "m7a.xlarge", UsageClass: "spot", CPU: 4, MemoryMiB: 16384,
		Deadline: f.Clock.Now().Add(domain.DefaultDeadlines().Releasing),
	})
}

func TestDeregisteredPoolsTheInstance(t *testing.T) {
	for _, tc := range []struct {
		name string
		idle time.Duration
		want time.Duration
	}{
		{"pool idle lifetime", 7 * time.Minute, 7 * time.Minute},
		{"ready default", 0, domain.DefaultDeadlines().Ready},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.policy = agentsPolicy(true, tc.idle)
			in := f.releasing("bp-1")
			f.Clock.Advance(30 * time.Second)
			if err := f.signal(in, domain.SignalDeregistered, ""); err != nil {
				t.Fatal(err)
			}
			threshold := f.Clock.Now().Add(tc.want)
			after := f.Instance(in.ID)
			if after.State != domain.StateReady || after.Job != "" || !after.Deadline.Equal(threshold) {
				t.Fatalf("got %s job %q until %s, want ready, unbound, until %s", after.State, after.Job, after.Deadline, threshold)
			}
			got := f.ResourcePool("medium")
			want := domain.ResourcePoolEntry{
				InstanceID: "bp-1", CloudID: "i-bp-1", UsageClass: "spot", InstanceType: "m7a.xlarge",
				CPU: 4, Mem: 16384, ResourceClass: "medium", Threshold: threshold,
			}
			if len(got) != 1 || !got[0].Threshold.Equal(want.Threshold) {
				t.Fatalf("resource pool holds %+v, want one %+v", got, want)
			}
			got[0].Threshold = want.Threshold // same instant, maybe another location
			if got[0] != want {
				t.Fatalf("entry %+v, want %+v", got[0], want)
			}
		})
	}
}

// The release timeout: a deregistered signal
// that comes after the releasing deadline never pools the instance.
func TestLateDeregisteredNeverPoolsTheInstance(t *testing.T) {
	for _, late := range []time.Duration{0, time.Second, time.Hour} {
		t.Run("deadline+"+late.String(), func(t *testing.T) {
			f := newFixture(t)
			f.policy = agentsPolicy(true, 0)
			in := f.releasing("bp-1")
			f.Clock.AdvanceTo(in.Deadline.Add(late))
			wantRejected(t, f.signal(in, domain.SignalDeregistered, ""))
			// Terminated now, so its agent stops releasing; never ready.
			if after := f.Instance(in.ID); after.State != domain.StateTerminating || after.Job != "" {
				t.Fatalf("expired release became %s job %q, want terminating", after.State, after.Job)
			}
			if got := f.ResourcePool("medium"); len(got) != 0 {
				t.Fatalf("expired instance pooled: %+v", got)
			}
		})
	}
}

func TestDeregisteredOutsideAReleaseIsRejected(t *testing.T) {
	for _, st := range []domain.State{domain.StateReady, domain.StateClaimed, domain.StateRunning, domain.StateError, domain.StateTerminating} {
		t.Run(string(st), func(t *testing.T) {
			f := newFixture(t)
			f.policy = agentsPolicy(true, 0)
			job := ""
			if st == domain.StateClaimed || st == domain.StateRunning {
				job = "42"
			}
			before := f.CreateInstance(domain.Instance{ID: "bp-1", State: st, Job: job})
			wantRejected(t, f.signal(before, domain.SignalDeregistered, ""))
			f.WantUnchanged(before)
			if got := f.ResourcePool("small"); len(got) != 0 {
				t.Fatalf("pooled from %s: %+v", st, got)
			}
		})
	}
}

func TestFailedRequeuesAnUnstartedJob(t *testing.T) {
	for _, route := range []domain.Route{domain.RouteLaunch, domain.RoutePool} {
		t.Run(string(route), func(t *testing.T) {
			f := newFixture(t)
			in := f.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateClaimed, Job: "42"})
			f.createJob(domain.Job{ID: 42, Status: domain.JobAssigned, Route: route, InstanceID: in.ID, Via: domain.ViaReuse, Attempts: 1})
			err := f.svc.Signal(f.Ctx, domain.Signal{CloudID: in.CloudID, Kind: domain.SignalFailed, Job: "42", Reason: "runner would not start"})
			if err != nil {
				t.Fatal(err)
			}
			after := f.Instance(in.ID)
			if after.State != domain.StateError || after.Reason != "runner would not start" {
				t.Fatalf("instance %s (%q), want error with the agent's reason", after.State, after.Reason)
			}
			f.wantDefaultDeadline(after)
			wantRequeued(t, f, route)
		})
	}
}

func TestAJobFailingOnInstanceAfterInstanceIsLoggedAsAnError(t *testing.T) {
	var logs testlog.Buffer
	f := newFixtureLogging(t, slog.New(slog.NewTextHandler(&logs, nil)))
	f.createJob(domain.Job{ID: 42, Status: domain.JobQueued, Pool: "small"})
	for k := range 3 {
		in := f.CreateInstance(domain.Instance{ID: fmt.Sprintf("bp-%d", k), State: domain.StateClaimed, Job: "42"})
		j := f.Job(42)
		bind := domain.Lifecycle{}.AssignJob(j, in.ID, domain.ViaReuse, domain.RunnerRegistration{RunnerID: 7, Name: in.ID + "-42"}, f.Clock.Now())
		if _, err := f.Store.TransitionJob(f.Ctx, 42, bind.Guard, bind.Apply); err != nil {
			t.Fatal(err)
		}
		err := f.svc.Signal(f.Ctx, domain.Signal{CloudID: in.CloudID, Kind: domain.SignalFailed, Job: "42", Reason: "exit status 127"})
		if err != nil {
			t.Fatal(err)
		}
		errors := logs.Lines("level=ERROR", "job=42")
		if want := k + 1; want < 3 && len(errors) > 0 || want == 3 && len(errors) != 1 {
			t.Fatalf("after %d failed instances, the errors logged are %q", want, errors)
		}
	}
	line := logs.Lines("level=ERROR")[0]
	for _, want := range []string{"pool=small", "failed_attempts=3", `last_reason="exit status 127"`, "next_try_in=8s"} {
		if !strings.Contains(line, want) {
			t.Errorf("the error %q does not say %s", line, want)
		}
	}
}

func wantRequeued(t *testing.T, f *fixture, route domain.Route) {
	t.Helper()
	j := f.Job(42)
	if j.Status != domain.JobQueued || j.InstanceID != "" || j.RunnerName != "" || j.RunnerID != 0 || j.Via != "" || j.Attempts != 2 {
		t.Fatalf("job %s on %q (runner %q #%d, via %q, attempts %d), want queued, unbound, attempts 2",
			j.Status, j.InstanceID, j.RunnerName, j.RunnerID, j.Via, j.Attempts)
	}
	queue := domain.QueueLaunch
	if route == domain.RoutePool {
		queue = domain.QueuePool
	}
	if visible, delayed := f.queued(queue); visible+delayed != 1 {
		t.Fatalf("%s queue holds %d visible and %d delayed, want the job once", queue, visible, delayed)
	}
}

func TestFailedInEachState(t *testing.T) {
	cases := []struct {
		name      string
		in        domain.Instance
		sigJob    string
		wantState domain.State // "" means rejected
	}{
		{"idle member", domain.Instance{State: domain.StateReady}, "", domain.StateError},
		{"booting member", domain.Instance{State: domain.StateBooting}, "", domain.StateError},
		{"releasing instance is never pooled", domain.Instance{State: domain.StateReleasing}, "", domain.StateError},
		{"started job stays with GitHub", domain.Instance{State: domain.StateRunning, Job: "42", JobStarted: true}, "42", domain.StateError},
		{"already terminating", domain.Instance{State: domain.StateTerminating, Job: "42"}, "42", domain.StateTerminating},
		{"terminated", domain.Instance{State: domain.StateTerminated}, "", domain.StateTerminated},
		{"stale report for another job", domain.Instance{State: domain.StateRunning, Job: "42"}, "41", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.in.ID = "bp-1"
			before := f.CreateInstance(tc.in)
			f.createJob(domain.Job{ID: 42, Status: domain.JobRunning, InstanceID: "bp-1"})
			err := f.signal(before, domain.SignalFailed, tc.sigJob)
			if tc.wantState == "" {
				wantRejected(t, err)
				f.WantUnchanged(before)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if after := f.Instance("bp-1"); after.State != tc.wantState {
				t.Fatalf("got %s, want %s", after.State, tc.wantState)
			}
			if tc.wantState == domain.StateError && f.Instance("bp-1").Reason != "agent reported a failure" {
				t.Fatalf("reason %q", f.Instance("bp-1").Reason)
			}
			if j := f.Job(42); j.Status != domain.JobRunning || j.InstanceID != "bp-1" {
				t.Fatalf("running job touched: %s on %q", j.Status, j.InstanceID)
			}
		})
	}
}

// A failure whose requeue did not happen (the process died between the two
// writes) is reported again: the repeat finishes the requeue.
func TestRepeatedFailedFinishesTheRequeue(t *testing.T) {
	f := newFixture(t)
	in := f.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateError, Job: "42", Reason: "boom"})
	f.createJob(domain.Job{ID: 42, Status: domain.JobAssigned, InstanceID: in.ID, Attempts: 1})
	if err := f.signal(in, domain.SignalFailed, "42"); err != nil {
		t.Fatal(err)
	}
	f.WantUnchanged(in)
	wantRequeued(t, f, domain.RouteLaunch)
	// Once the job has moved on to another instance, a further repeat
	// leaves it there.
	if _, err := f.Store.TransitionJob(f.Ctx, 42, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) {
		j.Status, j.InstanceID = domain.JobAssigned, "bp-2"
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.signal(in, domain.SignalFailed, "42"); err != nil {
		t.Fatal(err)
	}
	if j := f.Job(42); j.Status != domain.JobAssigned || j.InstanceID != "bp-2" {
		t.Fatalf("job %s on %q, want still assigned to bp-2", j.Status, j.InstanceID)
	}
}

// finishedByItsAgent is job 42 on instance bp-1, started and then reported
// finished by the instance's agent (how its runner exited).
func (f *fixture) finishedByItsAgent(t *testing.T) domain.Instance {
	t.Helper()
	in, _ := f.bound("bp-1", domain.StateRunning, 42)
	if err := f.signal(in, domain.SignalJobStarted, "42"); err != nil {
		t.Fatal(err)
	}
	err := f.svc.Signal(f.Ctx, domain.Signal{CloudID: in.CloudID, Kind: domain.SignalJobFinished, Job: "42", Reason: "exit status 0"})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func TestJobFinishedFinishesTheInstancesJob(t *testing.T) {
	f := newFixture(t)
	in := f.finishedByItsAgent(t)
	// How the runner process exited is not the job's conclusion: GitHub's
	// completed delivery brings that.
	if j := f.Job(42); j.Status != domain.JobCompleted || j.Conclusion != "" || !j.CompletedAt.Equal(f.Clock.Now()) {
		t.Fatalf("job %s (%q) at %s, want completed now, no conclusion yet", j.Status, j.Conclusion, j.CompletedAt)
	}
	if after := f.Instance(in.ID); after.State != domain.StateTerminating || after.Job != "" {
		t.Fatalf("instance %s bound to %q, want terminating (no reuse), unbound", after.State, after.Job)
	}
	f.wantNoRunner(in.ID)
	// The agent reports again when the first answer was lost: the repeat
	// is answered as done and changes nothing.
	released := f.Instance(in.ID)
	if err := f.signal(released, domain.SignalJobFinished, "42"); err != nil {
		t.Fatalf("a repeated job-finished: %v, want it taken as done", err)
	}
	f.WantUnchanged(released)
	// A job completed on another instance is not this one's to report.
	f.createJob(domain.Job{ID: 43, Status: domain.JobCompleted, InstanceID: "bp-2"})
	wantRejected(t, f.signal(released, domain.SignalJobFinished, "43"))
}

func TestJobFinishedFromAStaleInstanceIsRejected(t *testing.T) {
	f := newFixture(t)
	// bp-1 failed before its job started; the job went to bp-2.
	stale := f.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateError, Job: "42"})
	now, _ := f.bound("bp-2", domain.StateRunning, 42)
	wantRejected(t, f.signal(stale, domain.SignalJobFinished, "42"))
	wantRejected(t, f.signal(stale, domain.SignalJobFinished, "43"))
	f.WantUnchanged(stale)
	f.WantUnchanged(now)
	if j := f.Job(42); j.Status != domain.JobAssigned {
		t.Fatalf("job %s, want still assigned to bp-2", j.Status)
	}
}

// An agent cannot move a job: a report naming another instance's job, even
// one with the same labels, is refused and changes neither instance nor
// either job; the other instance's own reports still work.
func TestReportsAboutAnotherInstancesJobAreRefused(t *testing.T) {
	for _, kind := range []domain.SignalKind{domain.SignalRegistered, domain.SignalJobStarted,
		domain.SignalJobFinished, domain.SignalFailed} {
		t.Run(string(kind), func(t *testing.T) {
			f := newFixture(t)
			f.policy = agentsPolicy(true, 0)
			a, _ := f.bound("bp-1", domain.StateRunning, 42)
			b, _ := f.bound("bp-2", domain.StateClaimed, 43)
			j42, j43 := f.Job(42), f.Job(43)
			wantRejected(t, f.signal(a, kind, "43"))
			f.WantUnchanged(a)
			f.WantUnchanged(b)
			if got := f.Job(43); got.Version != j43.Version || got.InstanceID != "bp-2" {
				t.Fatalf("job 43 changed to %s on %q", got.Status, got.InstanceID)
			}
			if got := f.Job(42); got.Version != j42.Version {
				t.Fatalf("job 42 changed to %s on %q", got.Status, got.InstanceID)
			}
			for _, k := range []domain.SignalKind{domain.SignalRegistered, domain.SignalJobStarted, domain.SignalJobFinished} {
				if err := f.signal(f.Instance("bp-2"), k, "43"); err != nil {
					t.Fatalf("bp-2's own %s: %v", k, err)
				}
			}
			if j := f.Job(43); j.Status != domain.JobCompleted || j.InstanceID != "bp-2" {
				t.Fatalf("job 43 %s on %q, want completed by bp-2", j.Status, j.InstanceID)
			}
		})
	}
}

// The agent reports registered, job-started and job-finished in that order;
// a report that comes too early changes nothing, and a runner that ends
// before its job started did not run it: the job goes back to its queue.
func TestRunnerReportsAreTakenInOrder(t *testing.T) {
	t.Run("before registered", func(t *testing.T) {
		for _, kind := range []domain.SignalKind{domain.SignalJobStarted, domain.SignalJobFinished} {
			t.Run(string(kind), func(t *testing.T) {
				f := newFixture(t)
				in, _ := f.bound("bp-1", domain.StateClaimed, 42)
				wantRejected(t, f.signal(in, kind, "42"))
				f.WantUnchanged(in)
				if j := f.Job(42); j.Status != domain.JobAssigned {
					t.Fatalf("%s before registered: job %s, want still assigned", kind, j.Status)
				}
			})
		}
	})
	t.Run("finished before started", func(t *testing.T) {
		f := newFixture(t)
		in, _ := f.bound("bp-1", domain.StateRunning, 42)
		if err := f.signal(in, domain.SignalJobFinished, "42"); err != nil {
			t.Fatal(err)
		}
		if j := f.Job(42); j.Status != domain.JobQueued || j.InstanceID != "" || j.CompletedAt != (time.Time{}) {
			t.Fatalf("job %s on %q, want queued again, never completed", j.Status, j.InstanceID)
		}
		if after := f.Instance(in.ID); after.State != domain.StateError || after.Job != "" {
			t.Fatalf("instance %s bound to %q, want error, unbound", after.State, after.Job)
		}
	})
}

// Each instance a failure takes out of service is counted once, whether its
// agent reported the failure or its runner ended before its job started;
// repeated and refused reports are not.
func TestFailedInstancesAreCountedOnce(t *testing.T) {
	f := newFixture(t)
	claimed, _ := f.bound("bp-1", domain.StateClaimed, 42)
	for range 2 { // a report, then its repeat (its answer was lost)
		if err := f.signal(claimed, domain.SignalFailed, "42"); err != nil {
			t.Fatal(err)
		}
		claimed = f.Instance(claimed.ID)
	}
	running, _ := f.bound("bp-2", domain.StateRunning, 43)
	wantRejected(t, f.signal(running, domain.SignalFailed, "41")) // about another job
	if got := f.instancesFailed(); got != 1 {
		t.Fatalf("after one failure, its repeat and a refused report: %v failed instances, want 1", got)
	}
	// A runner that ends before its job started fails its instance too.
	if err := f.signal(running, domain.SignalJobFinished, "43"); err != nil {
		t.Fatal(err)
	}
	if after := f.Instance(running.ID); after.State != domain.StateError {
		t.Fatalf("instance %s, want error", after.State)
	}
	if got := f.instancesFailed(); got != 2 {
		t.Fatalf("after a runner ended before its job: %v failed instances, want 2", got)
	}
}

// An instance of a pool whose spec changed since it was launched (a new
// image rolled the pool) is retired after its job rather than offered for
// reuse, where it would serve the old spec for as long as it kept being
// pooled; one on the current spec is released for reuse.
func TestAnInstanceFromBeforeARollIsRetiredAfterItsJob(t *testing.T) {
	for _, tc := range []struct {
		current string
		want    domain.State
	}{
		{"new", domain.StateTerminating},
		{"old", domain.StateReleasing},
		{"", domain.StateReleasing}, // not known yet: nothing to hold it to
	} {
		t.Run(tc.current, func(t *testing.T) {
			f := newFixture(t)
			f.policy = agents.Policy{Reuse: true}
			svc, err := agents.New(f.Store, f.Queue, f.Clock, f.Log, nil, agents.Options{
				Policy:   func(domain.Instance) agents.Policy { return f.policy },
				SpecHash: func(_ context.Context, pool string) string { return map[string]string{"p": tc.current}[pool] },
			})
			if err != nil {
				t.Fatal(err)
			}
			in := f.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateRunning, Job: domain.JobKey(42), Pool: "p", SpecHash: "old",
				CPU: 4, MemoryMiB: 16384, RunnerName: runnerOf("bp-1", 42), RunnerConfig: configOf("bp-1"), JobStarted: true})
			f.createJob(domain.Job{ID: 42, Status: domain.JobRunning, InstanceID: in.ID, Labels: []string{"runs-on=1/pool=p"}})
			if err := svc.Finish(f.Ctx, 42, "success"); err != nil {
				t.Fatal(err)
			}
			if got := f.Instance(in.ID); got.State != tc.want {
				t.Fatalf("pool spec %q: instance %s (%q), want %s", tc.current, got.State, got.Reason, tc.want)
			}
		})
	}
}

// racedStore is the fixture's store, where before runs ahead of the next
// instance transition (another writer getting there first) and fail, when
// set, is that transition's error instead of the write.
type racedStore struct {
	agents.Store
	before func()
	fail   error
}

func (s *racedStore) Transition(ctx context.Context, id string, g domain.Guard, fn func(*domain.Instance)) (domain.Instance, error) {
	before, fail := s.before, s.fail
	s.before, s.fail = nil, nil
	if before != nil {
		before()
	}
	if fail != nil {
		return domain.Instance{}, fail
	}
	return s.Store.Transition(ctx, id, g, fn)
}

// A timed-out release is counted once, by whoever terminates it: not by
// the agents when the terminator expired the row first (that is the
// terminator's count), nor twice when the write failed and the agent's
// signal is retried.
func TestATimedOutReleaseIsCountedOnlyWhenTerminatedHere(t *testing.T) {
	f := newFixture(t)
	f.policy = agentsPolicy(true, 0)
	store := &racedStore{Store: f.Store}
	reg := prometheus.NewRegistry()
	svc, err := agents.New(store, f.Queue, f.Clock, f.Log, reg, agents.Options{
		Policy: func(domain.Instance) agents.Policy { return f.policy }, Notices: f,
	})
	if err != nil {
		t.Fatal(err)
	}
	deregister := func(in domain.Instance) error {
		return svc.Signal(f.Ctx, domain.Signal{CloudID: in.CloudID, Kind: domain.SignalDeregistered, At: f.Clock.Now()})
	}
	timedOut := func() float64 {
		v, _ := promtest.Value(t, reg, "bullpen_releases_total", "outcome", "timed_out")
		return v
	}

	expired := f.releasing("bp-1")
	f.Clock.AdvanceTo(expired.Deadline)
	store.before = func() {
		r := domain.NewLifecycle(domain.DefaultDeadlines()).Terminate(f.Instance(expired.ID), "expired in releasing", f.Clock.Now())
		if _, err := f.Store.Transition(f.Ctx, r.ID, r.Guard, r.Apply); err != nil {
			t.Fatal(err)
		}
	}
	wantRejected(t, deregister(expired))
	if got := f.Instance(expired.ID); got.State != domain.StateTerminating || got.Reason != "expired in releasing" {
		t.Fatalf("instance expired by the terminator is %s (%q)", got.State, got.Reason)
	}
	if got := timedOut(); got != 0 {
		t.Fatalf("a release the terminator expired counted %v times as timed out here, want 0", got)
	}

	failed := f.releasing("bp-2")
	f.Clock.AdvanceTo(failed.Deadline)
	store.fail = errors.New("store unavailable")
	if err := deregister(failed); err == nil || errors.Is(err, domain.ErrRejected) {
		t.Fatalf("a deregistered signal whose write failed returned %v, want the store's error", err)
	}
	wantRejected(t, deregister(failed))
	if got := f.Instance(failed.ID); got.State != domain.StateTerminating {
		t.Fatalf("timed-out release is %s after the retry, want terminating", got.State)
	}
	if got := timedOut(); got != 1 {
		t.Fatalf("a timed-out release retried after a failed write counted %v times, want 1", got)
	}
}
