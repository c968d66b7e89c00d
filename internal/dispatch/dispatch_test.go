package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

// fixture is a dispatcher on the test world, the simulated cloud and
// GitHub; it notes the agents the dispatcher wakes.
type fixture struct {
	*testworld.World
	cloud *sim.Cloud
	gh    *ghsim.GitHub
	d     *Dispatcher
	woken []string
	mu    sync.Mutex
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{World: testworld.New(t, t0)}
	f.cloud = f.NewCloud(sim.Options{})
	f.d = f.newDispatcher(f.cloud)
	return f
}

// newDispatcher sets the fixture's dispatcher up on cloud.
func (f *fixture) newDispatcher(cloud domain.Cloud) *Dispatcher {
	f.T.Helper()
	f.gh = ghsim.New(f.Clock, ghsim.Options{})
	d, err := New(Deps{
		Store: f.Store, Queue: f.Queue, Cloud: cloud, GitHub: f.gh, Clock: f.Clock, Log: f.Log, Scope: testworld.Scope,
		Notify: func(id string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.woken = append(f.woken, id)
		},
	}, nil, Options{Wait: -1})
	if err != nil {
		f.T.Fatal(err)
	}
	return d
}

// members launches n machines and records them as pool members in state.
func (f *fixture) members(pool string, role domain.Role, state domain.State, n int) []domain.Instance {
	f.T.Helper()
	ms, err := f.cloud.Create(f.Ctx, domain.LaunchSpec{Runner: domain.RunnerSpec{Name: "small"}, ImageID: "ami-1", Count: n})
	if err != nil {
		f.T.Fatal(err)
	}
	if state == domain.StateStopped {
		for _, b := range domain.Chunk(cloudIDsOf(ms), domain.MaxBatch) {
			if err := f.cloud.Stop(f.Ctx, b); err != nil {
				f.T.Fatal(err)
			}
		}
	}
	rows := make([]domain.Instance, n)
	for i, m := range ms {
		rows[i] = domain.Instance{ID: fmt.Sprintf("%s-%s-%s-%03d", pool, role, state, i), CloudID: m.ID, Pool: pool, Role: role,
			Runner: "small", State: state, Deadline: t0.Add(time.Hour)}
	}
	if err := f.Store.CreateInstances(f.Ctx, rows); err != nil {
		f.T.Fatal(err)
	}
	f.cloud.ResetCalls()
	return rows
}

func cloudIDsOf(ms []domain.CloudInstance) []string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

// queueJobs records n queued pool jobs and sends them to the pool queue.
func (f *fixture) queueJobs(pool string, first int64, n int) []domain.Job {
	f.T.Helper()
	js := make([]domain.Job, n)
	for i := range js {
		js[i] = domain.Job{ID: first + int64(i), RunID: 7, Repo: "acme/app", Labels: []string{"runs-on=7/pool=" + pool},
			Status: domain.JobQueued, Route: domain.RoutePool, Pool: pool, Runner: "small"}
	}
	return f.Enqueue(domain.QueuePool, js)
}

func TestBatchPrefersRunningInstancesAndOverflowsTheRest(t *testing.T) {
	f := newFixture(t)
	hot := f.members("p", domain.RoleHot, domain.StateReady, 1)
	stopped := f.members("p", domain.RoleStopped, domain.StateStopped, 1)
	f.queueJobs("p", 100, 3)

	res, err := f.d.Step(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Received != 3 || res.Assigned != 2 || res.Overflowed != 1 {
		t.Fatalf("result %+v", res)
	}
	j100, j101, j102 := f.Job(100), f.Job(101), f.Job(102)
	if j100.InstanceID != hot[0].ID || j101.InstanceID != stopped[0].ID {
		t.Fatalf("the first job must get the running instance: %s, %s", j100.InstanceID, j101.InstanceID)
	}
	for _, j := range []domain.Job{j100, j101} {
		via := map[string]domain.Via{hot[0].ID: domain.ViaHot, stopped[0].ID: domain.ViaStopped}[j.InstanceID]
		if j.Status != domain.JobAssigned || j.Via != via || j.RunnerName != domain.RunnerName(j.InstanceID, j.ID) || j.RunnerID == 0 {
			t.Fatalf("job %d: %+v", j.ID, j)
		}
		// The registration is the instance's: its agent starts that runner.
		in, err := f.Store.GetInstance(f.Ctx, j.InstanceID)
		if err != nil || in.RunnerName != j.RunnerName || in.RunnerConfig == "" {
			t.Fatalf("instance %s holds runner %q (config set: %t) %v, want job %d's %q with its config",
				j.InstanceID, in.RunnerName, in.RunnerConfig != "", err, j.ID, j.RunnerName)
		}
	}
	if j102.Status != domain.JobQueued || j102.Route != domain.RouteLaunch {
		t.Fatalf("overflow job %+v", j102)
	}
	if st, _ := f.Queue.Stats(f.Ctx, domain.QueueLaunch); st.Visible != 1 {
		t.Fatalf("launch queue %+v", st)
	}
	if st, _ := f.Queue.Stats(f.Ctx, domain.QueuePool); st.Visible+st.InFlight+st.Delayed != 0 {
		t.Fatalf("pool queue not drained: %+v", st)
	}
	calls := f.cloud.Calls()
	if calls[sim.OpCreateTags] != 1 || calls[sim.OpStartInstances] != 1 {
		t.Fatalf("cloud calls %v", calls)
	}
	if m, _ := f.cloud.Get(stopped[0].CloudID); m.State == domain.CloudStopped {
		t.Fatal("the stopped instance was not started")
	}
	for _, in := range append(hot, stopped...) {
		got, _ := f.Store.GetInstance(f.Ctx, in.ID)
		if got.State != domain.StateClaimed || got.Job == "" {
			t.Fatalf("instance %s: %s job %q", in.ID, got.State, got.Job)
		}
	}
	if len(f.woken) != 2 {
		t.Fatalf("agents woken: %v", f.woken)
	}
}

func TestBurstOf1000CostsFewCloudCalls(t *testing.T) {
	f := newFixture(t)
	f.members("p", domain.RoleStopped, domain.StateStopped, 1000)
	f.queueJobs("p", 1, 1000)
	total := 0
	for total < 1000 {
		res, err := f.d.Step(f.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Received == 0 {
			t.Fatalf("queue ran dry after %d jobs", total)
		}
		total += res.Assigned
	}
	calls, most := f.cloud.Calls(), f.cloud.MaxIDsPerCall()
	if calls[sim.OpStartInstances] > 1000/50 || most[sim.OpStartInstances] > domain.MaxBatch {
		t.Fatalf("StartInstances: %d calls, up to %d ids", calls[sim.OpStartInstances], most[sim.OpStartInstances])
	}
	if calls[sim.OpCreateTags] > 1000/50 {
		t.Fatalf("CreateTags: %d calls", calls[sim.OpCreateTags])
	}
	assertNoDoubleAssignment(t, f)
}

func TestFailedStartGivesTheInstanceBackAndRetriesTheJob(t *testing.T) {
	f := newFixture(t)
	stopped := f.members("p", domain.RoleStopped, domain.StateStopped, 1)
	f.queueJobs("p", 1, 1)
	f.cloud.FailNext(sim.OpStartInstances, 1, errors.New("InternalError"))
	res, err := f.d.Step(f.Ctx)
	if err != nil || res.Retried != 1 || res.Assigned != 0 {
		t.Fatalf("result %+v err %v", res, err)
	}
	in, _ := f.Store.GetInstance(f.Ctx, stopped[0].ID)
	if in.State != domain.StateStopped || in.Job != "" || in.RunnerName != "" || in.RunnerConfig != "" {
		t.Fatalf("instance after a failed start: %s job %q runner %q", in.State, in.Job, in.RunnerName)
	}
	if j := f.Job(1); j.Status != domain.JobQueued || j.InstanceID != "" {
		t.Fatalf("job after a failed start: %+v", j)
	}
	f.Clock.Advance(jobs.RequeueDelay)
	res, err = f.d.Step(f.Ctx)
	if err != nil || res.Assigned != 1 {
		t.Fatalf("retry: %+v %v", res, err)
	}
}

func TestCancelledJobIsSkipped(t *testing.T) {
	f := newFixture(t)
	hot := f.members("p", domain.RoleHot, domain.StateReady, 1)
	f.queueJobs("p", 1, 1)
	done := domain.Lifecycle{}.CompleteJob(f.Job(1), t0, "cancelled")
	if _, err := f.Store.TransitionJob(f.Ctx, 1, done.Guard, done.Apply); err != nil {
		t.Fatal(err)
	}
	res, err := f.d.Step(f.Ctx)
	if err != nil || res.Skipped != 1 || res.Assigned != 0 {
		t.Fatalf("result %+v err %v", res, err)
	}
	if in, _ := f.Store.GetInstance(f.Ctx, hot[0].ID); in.State != domain.StateReady {
		t.Fatalf("instance claimed for a cancelled job: %s", in.State)
	}
}

func TestConcurrentDispatchersNeverShareAnInstance(t *testing.T) {
	f := newFixture(t)
	f.members("p", domain.RoleHot, domain.StateReady, 20)
	f.queueJobs("p", 1, 200)
	second, err := New(f.d.Deps, nil, Options{Wait: -1, BatchMax: 7})
	if err != nil {
		t.Fatal(err)
	}
	f.d.opts.BatchMax = 11
	var wg sync.WaitGroup
	for _, d := range []*Dispatcher{f.d, second, f.d, second} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := d.Step(f.Ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Received == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	list, _ := f.Store.ListJobs(f.Ctx, domain.JobFilter{})
	assigned, overflowed := 0, 0
	for _, j := range list {
		switch {
		case j.Status == domain.JobAssigned:
			assigned++
		case j.Status == domain.JobQueued && j.Route == domain.RouteLaunch:
			overflowed++
		default:
			t.Errorf("job %d lost: %s route %s", j.ID, j.Status, j.Route)
		}
	}
	if assigned != 20 || assigned+overflowed != 200 {
		t.Fatalf("%d assigned, %d overflowed", assigned, overflowed)
	}
	assertNoDoubleAssignment(t, f)
}

func assertNoDoubleAssignment(t *testing.T, f *fixture) {
	t.Helper()
	list, err := f.Store.ListJobs(f.Ctx, domain.JobFilter{Statuses: []domain.JobStatus{domain.JobAssigned}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int64{}
	for _, j := range list {
		if other, ok := seen[j.InstanceID]; ok {
			t.Fatalf("instance %s assigned to jobs %d and %d", j.InstanceID, other, j.ID)
		}
		seen[j.InstanceID] = j.ID
		in, err := f.Store.GetInstance(f.Ctx, j.InstanceID)
		if err != nil || in.Job != j.Key() {
			t.Fatalf("job %d's instance %s is bound to %q", j.ID, j.InstanceID, in.Job)
		}
		if in.RunnerName != j.RunnerName || in.RunnerConfig == "" {
			t.Fatalf("job %d's instance %s holds runner %q (config set: %t), want %q", j.ID, in.ID, in.RunnerName, in.RunnerConfig != "", j.RunnerName)
		}
	}
}

// serveOneJob queues job 100 in pool p, runs a step of the fixture's
// dispatcher, and returns the instance the job went to.
func (f *fixture) serveOneJob() string {
	f.T.Helper()
	f.queueJobs("p", 100, 1)
	if _, err := f.d.Step(f.Ctx); err != nil {
		f.T.Fatal(err)
	}
	return f.Job(100).InstanceID
}

// An instance back from a job serves before a hot member: taking the
// member would launch its replacement while the reusable one sits idle.
func TestAReusableInstanceServesBeforeAHotMember(t *testing.T) {
	f := newFixture(t)
	hot := f.members("p", domain.RoleHot, domain.StateReady, 1)
	reused := f.members("p", domain.RoleOnDemand, domain.StateReady, 1)
	if got := f.serveOneJob(); got != reused[0].ID {
		t.Errorf("job 100 went to %s, want the reusable %s before the hot member %s", got, reused[0].ID, hot[0].ID)
	}
}

// A reusable instance from before the pool's roll (another spec hash) does
// not take the pool's jobs: a member of the current spec does.
func TestAReusableInstanceOfAnOutdatedSpecIsPassedOver(t *testing.T) {
	f := newFixture(t)
	f.d.SpecHash = func(context.Context, string) string { return "current" }
	hot := f.members("p", domain.RoleHot, domain.StateReady, 1)
	reused := f.members("p", domain.RoleOnDemand, domain.StateReady, 1)
	for _, c := range []struct {
		in   domain.Instance
		hash string
	}{{hot[0], "current"}, {reused[0], "before-the-roll"}} {
		if _, err := f.Store.Transition(f.Ctx, c.in.ID, domain.Guard{State: domain.StateReady}, func(in *domain.Instance) { in.SpecHash = c.hash }); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.serveOneJob(); got != hot[0].ID {
		t.Errorf("job 100 went to %s, want the current member %s, not the outdated reusable %s", got, hot[0].ID, reused[0].ID)
	}
}

// How each pool job was served is recorded when its instance is claimed,
// from the instance as it was then: a reusable instance (no longer a
// member) is reuse, a running member hot, whatever its role, and only a
// member started for the job is stopped.
func TestEachPoolJobRecordsHowItsInstanceWasClaimed(t *testing.T) {
	f := newFixture(t)
	reused := f.members("p", domain.RoleOnDemand, domain.StateReady, 1)
	hot := f.members("p", domain.RoleHot, domain.StateReady, 1)
	warm := f.members("p", domain.RoleStopped, domain.StateReady, 1) // not stopped yet after warming up
	stopped := f.members("p", domain.RoleStopped, domain.StateStopped, 1)
	f.queueJobs("p", 100, 4)
	res, err := f.d.Step(f.Ctx)
	if err != nil || res.Assigned != 4 {
		t.Fatalf("result %+v err %v", res, err)
	}
	want := map[string]domain.Via{reused[0].ID: domain.ViaReuse, hot[0].ID: domain.ViaHot, warm[0].ID: domain.ViaHot,
		stopped[0].ID: domain.ViaStopped}
	for id := int64(100); id < 104; id++ {
		j := f.Job(id)
		if w, ok := want[j.InstanceID]; !ok || j.Via != w {
			t.Errorf("job %d on %s: via %q, want %q", id, j.InstanceID, j.Via, w)
		}
		delete(want, j.InstanceID)
	}
	if len(want) != 0 {
		t.Errorf("instances that served no job: %v", want)
	}
}
