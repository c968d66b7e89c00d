package dispatch

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// stoppedMember launches one machine, stops it and records it as a stopped
// member of pool with the instance type given.
func (f *fixture) stoppedMember(pool, id, instanceType string) domain.Instance {
	f.T.Helper()
	ms, err := f.cloud.Create(f.Ctx, domain.LaunchSpec{Runner: domain.RunnerSpec{Name: "small"}, ImageID: "ami-1", Count: 1})
	if err != nil {
		f.T.Fatal(err)
	}
	if err := f.cloud.Stop(f.Ctx, cloudIDsOf(ms)); err != nil {
		f.T.Fatal(err)
	}
	f.cloud.ResetCalls()
	return f.CreateInstance(domain.Instance{ID: id, CloudID: ms[0].ID, Pool: pool, Role: domain.RoleStopped,
		State: domain.StateStopped, InstanceType: instanceType})
}

// wantOnLaunchQueue fails unless job id waits on the launch queue, bound to
// no instance.
func wantOnLaunchQueue(t *testing.T, f *fixture, id int64) {
	t.Helper()
	if j := f.Job(id); j.Status != domain.JobQueued || j.Route != domain.RouteLaunch || j.InstanceID != "" {
		t.Fatalf("job %d is %s on route %s, instance %q; want it queued for a launch", id, j.Status, j.Route, j.InstanceID)
	}
}

// wantStoppedAndFree fails unless the instance is back in its pool, stopped
// in the store and in the cloud, bound to no job.
func wantStoppedAndFree(t *testing.T, f *fixture, in domain.Instance) {
	t.Helper()
	got := f.Instance(in.ID)
	if got.State != domain.StateStopped || got.Job != "" || got.RunnerName != "" {
		t.Fatalf("instance %s is %s, job %q, runner %q; want it stopped and free", in.ID, got.State, got.Job, got.RunnerName)
	}
	if m, _ := f.cloud.Get(in.CloudID); m.State != domain.CloudStopped {
		t.Fatalf("machine %s is %s in the cloud, want stopped", in.CloudID, m.State)
	}
}

// A stopped member the cloud has no capacity to start does not hold its
// job: retried, the job claimed the same member again and waited for as
// long as the shortage lasted. It goes to the launch queue within the
// step, the member back to stopped.
func TestNoCapacityToStartSendsTheJobToTheLaunchQueue(t *testing.T) {
	f := newFixture(t)
	member := f.members("p", domain.RoleStopped, domain.StateStopped, 1)[0]
	f.queueJobs("p", 1, 1)
	f.cloud.FailNext(sim.OpStartInstances, 1000, domain.ErrInsufficientCapacity)
	var log testlog.Buffer
	d := f.dispatcherWith(withLog(&log), Options{Wait: -1})

	res, err := d.Step(f.Ctx)
	if err != nil || res.NoCapacity != 1 || res.Overflowed != 0 || res.Retried != 0 || res.Assigned != 0 {
		t.Fatalf("result %+v err %v; want the job moved for lack of capacity", res, err)
	}
	wantOnLaunchQueue(t, f, 1)
	if j := f.Job(1); !strings.Contains(j.Reason, "no capacity to start") {
		t.Fatalf("job reason %q; want it to say the cloud could not start its instance", j.Reason)
	}
	wantStoppedAndFree(t, f, member)
	if st := f.Stats(domain.QueueLaunch); st.Visible != 1 {
		t.Fatalf("launch queue %+v; want the job's message", st)
	}
	if st := f.Stats(domain.QueuePool); st.Visible+st.InFlight+st.Delayed != 0 {
		t.Fatalf("pool queue %+v; want it drained", st)
	}
	if n := f.gh.Calls()[ghsim.OpRegisterRunner]; n != 0 {
		t.Fatalf("%d runners registered; want none for a member that did not start", n)
	}
	if got := testutil.ToFloat64(d.metrics.jobs.WithLabelValues("overflow_no_capacity")); got != 1 {
		t.Fatalf("overflow_no_capacity counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(d.metrics.jobs.WithLabelValues("overflow")); got != 0 {
		t.Fatalf("overflow counted %v, want 0: the pool had an instance", got)
	}
	if lines := log.Lines("level=WARN", "no capacity to start", "count=1"); len(lines) != 1 {
		t.Fatalf("log %q; want one warning for the batch", log.String())
	}
	assertNoInstanceHeldForNothing(t, f)
}

// capacityShort is a cloud with no capacity for some machines' type: a
// start call that includes one of them fails whole, as EC2's does.
type capacityShort struct {
	domain.Cloud
	short []string // cloud ids
	mu    sync.Mutex
	calls [][]string
}

func (c *capacityShort) Start(ctx context.Context, ids []string) error {
	c.mu.Lock()
	c.calls = append(c.calls, slices.Clone(ids))
	c.mu.Unlock()
	if slices.ContainsFunc(ids, func(id string) bool { return slices.Contains(c.short, id) }) {
		return &domain.CloudError{Op: sim.OpStartInstances, Code: sim.CodeInsufficient, Err: domain.ErrInsufficientCapacity}
	}
	return c.Cloud.Start(ctx, ids)
}

// One instance type short of capacity does not keep the batch's other
// types stopped: the refused call is made again once per type, and only
// the short type's jobs go to the launch queue.
func TestNoCapacityForOneTypeStartsTheOthers(t *testing.T) {
	f := newFixture(t)
	short := f.stoppedMember("p", "p-a", "c7a.large")
	fine := f.stoppedMember("p", "p-b", "m7i.large")
	f.queueJobs("p", 1, 2)
	cloud := &capacityShort{Cloud: f.cloud, short: []string{short.CloudID}}
	d := f.dispatcherWith(func(d *Deps) { d.Cloud = cloud }, Options{Wait: -1})

	res, err := d.Step(f.Ctx)
	if err != nil || res.Assigned != 1 || res.NoCapacity != 1 || res.Retried != 0 {
		t.Fatalf("result %+v err %v; want one job served, one moved for lack of capacity", res, err)
	}
	if len(cloud.calls) != 3 || len(cloud.calls[0]) != 2 {
		t.Fatalf("start calls %v; want one for both, then one per type", cloud.calls)
	}
	wantStoppedAndFree(t, f, short)
	if in := f.Instance(fine.ID); in.State != domain.StateClaimed || in.Job == "" {
		t.Fatalf("instance of the type with capacity is %s, job %q; want it serving", in.State, in.Job)
	}
	moved := int64(1)
	if f.Job(1).InstanceID == fine.ID {
		moved = 2
	}
	wantOnLaunchQueue(t, f, moved)
	assertNoInstanceHeldForNothing(t, f)
}

// A start call with an id the cloud does not know starts the others
// (domain.Cloud): only the unknown instance's job is retried, the others
// are served, and their running machines are not recorded as stopped.
func TestUnknownInstanceFailsOnlyItsOwnStart(t *testing.T) {
	f := newFixture(t)
	known := f.members("p", domain.RoleStopped, domain.StateStopped, 2)
	gone := f.CreateInstance(domain.Instance{ID: "p-gone", CloudID: "i-gone", Pool: "p", Role: domain.RoleStopped,
		State: domain.StateStopped})
	f.queueJobs("p", 1, 3)

	res, err := f.d.Step(f.Ctx)
	if err != nil || res.Assigned != 2 || res.Retried != 1 || res.NoCapacity != 0 {
		t.Fatalf("result %+v err %v; want 2 served and the unknown instance's job retried", res, err)
	}
	for _, in := range known {
		if got := f.Instance(in.ID); got.State != domain.StateClaimed || got.Job == "" {
			t.Fatalf("started instance %s is %s, job %q; want it serving", in.ID, got.State, got.Job)
		}
	}
	if got := f.Instance(gone.ID); got.State != domain.StateStopped || got.Job != "" {
		t.Fatalf("unknown instance is %s, job %q; want it given back", got.State, got.Job)
	}
	assertNoInstanceHeldForNothing(t, f)
}

// stillStopping is a cloud on which some machines are still stopping: a
// start call starts the others and names these as refused, as the port
// says a provider does.
type stillStopping struct {
	domain.Cloud
	stopping []string // cloud ids
}

func (c stillStopping) Start(ctx context.Context, ids []string) error {
	rest := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(c.stopping, id) })
	if len(rest) > 0 {
		if err := c.Cloud.Start(ctx, rest); err != nil {
			return err
		}
	}
	if len(rest) == len(ids) {
		return nil
	}
	return &domain.CloudError{Op: sim.OpStartInstances, Code: sim.CodeIncorrectState, Err: &domain.RefusedInstancesError{
		Op: sim.OpStartInstances, Code: sim.CodeIncorrectState, IDs: c.stopping, Reason: "not in a state from which it can be started"}}
}

// A start call that the cloud refused for one machine (still stopping)
// started the others: only the refused instance's job is retried, the
// others are served, and their running machines are not recorded as
// stopped.
func TestAMachineStillStoppingFailsOnlyItsOwnStart(t *testing.T) {
	f := newFixture(t)
	members := f.members("p", domain.RoleStopped, domain.StateStopped, 3)
	slow := members[1]
	f.queueJobs("p", 1, 3)
	d := f.dispatcherWith(func(d *Deps) { d.Cloud = stillStopping{Cloud: f.cloud, stopping: []string{slow.CloudID}} }, Options{Wait: -1})

	res, err := d.Step(f.Ctx)
	if err != nil || res.Assigned != 2 || res.Retried != 1 || res.NoCapacity != 0 {
		t.Fatalf("result %+v err %v; want 2 served and the refused instance's job retried", res, err)
	}
	for _, in := range []domain.Instance{members[0], members[2]} {
		got := f.Instance(in.ID)
		if m, _ := f.cloud.Get(in.CloudID); got.State != domain.StateClaimed || got.Job == "" || m.State != domain.CloudRunning {
			t.Fatalf("started instance %s is %s, job %q, machine %s; want it serving", in.ID, got.State, got.Job, m.State)
		}
	}
	wantStoppedAndFree(t, f, slow)
	assertNoInstanceHeldForNothing(t, f)
}
