package dispatch

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/loop/looptest"
)

var errStoreDown = errors.New("store is down")

// failingStore fails the failOn-th TransitionBatch call from now on (1 is
// the next one), as a store that breaks mid-batch does.
type failingStore struct {
	Store
	mu     sync.Mutex
	calls  int
	failOn int
}

func (s *failingStore) TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error) {
	s.mu.Lock()
	s.calls++
	fail := s.calls == s.failOn
	s.mu.Unlock()
	if fail {
		return nil, errStoreDown
	}
	return s.Store.TransitionBatch(ctx, reqs)
}

// dispatcherWith returns a dispatcher like the fixture's, with the store
// and queue wrapped.
func (f *fixture) dispatcherWith(wrap func(*Deps), o Options) *Dispatcher {
	f.T.Helper()
	deps := f.d.Deps
	wrap(&deps)
	d, err := New(deps, nil, o)
	if err != nil {
		f.T.Fatal(err)
	}
	return d
}

// assertNoInstanceHeldForNothing checks that every instance bound to a job
// serves it: the job is assigned to that instance, and the instance holds
// the job's runner.
func assertNoInstanceHeldForNothing(t *testing.T, f *fixture) {
	t.Helper()
	insts, err := f.Store.ListInstances(f.Ctx, domain.InstanceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range insts {
		if in.Job == "" && in.State != domain.StateClaimed {
			continue
		}
		id, err := domain.ParseJobKey(in.Job)
		if err != nil {
			t.Fatalf("instance %s is %s with job %q", in.ID, in.State, in.Job)
		}
		j := f.Job(id)
		if j.Status != domain.JobAssigned || j.InstanceID != in.ID || in.RunnerName == "" || in.RunnerName != j.RunnerName {
			t.Fatalf("instance %s (%s, runner %q) bound to job %d, which is %s on %q with runner %q",
				in.ID, in.State, in.RunnerName, id, j.Status, j.InstanceID, j.RunnerName)
		}
	}
}

// A store error while claiming for a later pool of a batch must not leave
// the instances claimed for earlier pools bound to jobs nobody serves: they
// go back as they were, and their jobs' messages come back soon.
func TestClaimFailureGivesBackTheBatchsClaims(t *testing.T) {
	f := newFixture(t)
	before := map[string]domain.State{}
	for _, pool := range []string{"a", "b"} {
		for _, in := range append(f.members(pool, domain.RoleHot, domain.StateReady, 1), f.members(pool, domain.RoleStopped, domain.StateStopped, 1)...) {
			before[in.ID] = in.State
		}
	}
	f.queueJobs("a", 1, 2)
	f.queueJobs("b", 11, 2)
	st := &failingStore{Store: f.Store, failOn: 2} // the second pool's claim
	d := f.dispatcherWith(func(d *Deps) { d.Store = st }, Options{Wait: -1})

	res, err := d.Step(f.Ctx)
	if !errors.Is(err, errStoreDown) || res.Assigned != 0 || res.Retried != 2 {
		t.Fatalf("result %+v err %v; want the store's error and the first pool's 2 claims retried", res, err)
	}
	for id, state := range before {
		in, err := f.Store.GetInstance(f.Ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if in.State != state || in.Job != "" || in.RunnerName != "" {
			t.Errorf("instance %s %s job %q runner %q; want it %s and free", id, in.State, in.Job, in.RunnerName, state)
		}
	}
	if calls := f.cloud.Calls(); len(calls) != 0 {
		t.Errorf("cloud calls %v, want none for an abandoned batch", calls)
	}
	for _, id := range []int64{1, 2, 11, 12} {
		if j := f.Job(id); j.Status != domain.JobQueued || j.InstanceID != "" {
			t.Errorf("job %d %s on %q; want queued, unbound", id, j.Status, j.InstanceID)
		}
	}
	// The given-back jobs are visible again after the requeue delay, the
	// others once their visibility times out; then all four are served.
	f.Clock.Advance(jobs.RequeueDelay)
	if res, err := f.d.Step(f.Ctx); err != nil || res.Received != 2 || res.Assigned != 2 {
		t.Fatalf("after the requeue delay: %+v %v; want the 2 given-back jobs served", res, err)
	}
	f.wantRestServed(t, 2)
}

// The same failure while topping a batch up (fillLastStart) keeps what the
// top-up claimed: those instances serve their jobs with the batch.
func TestClaimFailureWhileToppingUpKeepsItsClaims(t *testing.T) {
	f := newFixture(t)
	f.members("a", domain.RoleStopped, domain.StateStopped, 2)
	f.members("b", domain.RoleStopped, domain.StateStopped, 1)
	f.queueJobs("a", 1, 1)
	f.queueJobs("a", 2, 1)
	f.queueJobs("b", 11, 1)
	// Call 1 claims the batch's one job; the top-up brings jobs 2 and 11,
	// and the claim for its second pool (call 3) fails.
	st := &failingStore{Store: f.Store, failOn: 3}
	d := f.dispatcherWith(func(d *Deps) { d.Store = st }, Options{Wait: -1, BatchMax: 1})

	res, err := d.Step(f.Ctx)
	if err != nil || res.Received != 3 || res.Assigned != 2 {
		t.Fatalf("result %+v err %v; want 3 received, the batch's job and the top-up's claimed one served", res, err)
	}
	assertNoInstanceHeldForNothing(t, f)
	if j := f.Job(1); j.Status != domain.JobAssigned {
		t.Fatalf("the batch's own job is %s", j.Status)
	}
	if f.Job(2).Status == f.Job(11).Status {
		t.Fatalf("jobs 2 and 11 both %s; want one served, one left for later", f.Job(2).Status)
	}
	f.wantRestServed(t, 1)
}

// wantRestServed lets the visibility timeout run out and wants the n jobs
// left served by one step, with no instance held for nothing and no job
// assigned twice.
func (f *fixture) wantRestServed(t *testing.T, n int) {
	t.Helper()
	f.Clock.Advance(f.d.opts.Visibility)
	if res, err := f.d.Step(f.Ctx); err != nil || res.Assigned != n {
		t.Fatalf("after the visibility timeout: %+v %v; want the %d jobs left served", res, err, n)
	}
	assertNoInstanceHeldForNothing(t, f)
	assertNoDoubleAssignment(t, f)
}

// Without a long poll (tests, the simulator) an empty queue must not make
// Run spin: it waits a little on its clock between receives.
func TestRunWithoutLongPollWaitsBetweenEmptyReceives(t *testing.T) {
	f := newFixture(t)
	looptest.CheckIdlePolls(t, f.Clock, domain.QueuePool, idlePoll, func(wrap func(domain.Queue) domain.Queue) loop.Loop {
		return f.dispatcherWith(func(d *Deps) { d.Queue = wrap(d.Queue) }, Options{Wait: -1}).Loop()
	})
}
