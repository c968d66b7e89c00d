package intake

import (
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// withPool is the fixture's routing with one more production pool,
// "gpu", as a reload that added it puts in force.
func withPool() Routing {
	r := fixtureRouting()
	r.Pools["gpu"] = domain.Pool{Name: "gpu", Environment: "production", Runner: "small-x64"}
	return r
}

// readmit rejects job id on its delivery under the fixture's routing,
// then readmits it as the reaper does once the configuration takes it.
func (f *fixture) readmit(ev jobEvent) domain.Job {
	f.T.Helper()
	f.deliver(ev)
	f.step()
	j := f.Job(ev.id)
	if j.Status != domain.JobRejected {
		f.T.Fatalf("job %d %s, want rejected first", ev.id, j.Status)
	}
	r := domain.Lifecycle{}.Readmit(j)
	j, err := f.Store.TransitionJob(f.Ctx, r.ID, r.Guard, r.Apply)
	if err != nil {
		f.T.Fatal(err)
	}
	return j
}

// A job rejected for a pool that was not in force, readmitted once it is,
// is routed by the queued delivery that comes for it as a new arrival is:
// recorded with its pool and runner and sent to the pool queue, not
// dropped as a duplicate of the delivery that rejected it.
func TestAReadmittedJobIsRoutedByItsNextQueuedDelivery(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ev := jobEvent{action: "queued", id: 14_001, runID: 161, labels: []string{"runs-on=161/pool=gpu"}}
	f.readmit(ev)
	f.in.Routing = withPool

	f.deliver(ev)
	f.step()
	j := f.Job(14_001)
	if j.Status != domain.JobQueued || j.Route != domain.RoutePool || j.Pool != "gpu" || j.Runner != "small-x64" ||
		j.Spec.Name != "small-x64" || j.Reason != "" {
		t.Fatalf("job %s route %q pool %q runner %q reason %q; want queued for pool gpu", j.Status, j.Route, j.Pool, j.Runner, j.Reason)
	}
	f.wantQueued(domain.QueuePool, 14_001)
	f.wantEvents("queued", "pool", 1)
	f.wantEvents("queued", "duplicate", 0)
	f.inboxEmpty()

	// A redelivery now is a duplicate: sent again, deduplicated.
	f.deliver(ev)
	f.step()
	f.wantQueued(domain.QueuePool, 14_001)
	f.wantEvents("queued", "pool", 1)
	f.wantEvents("queued", "duplicate", 1)
}

// A readmitted job whose delivery finds the configuration still without
// its pool (this replica has not reloaded yet, or the reload was undone) is
// rejected again, and said so, rather than left queued with no route.
func TestAReadmittedJobTheConfigurationStillRefusesIsRejectedAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ev := jobEvent{action: "queued", id: 14_002, runID: 162, labels: []string{"runs-on=162/pool=gpu"}}
	f.readmit(ev)
	f.deliver(ev)
	f.step()
	if j := f.Job(14_002); j.Status != domain.JobRejected || !strings.Contains(j.Reason, `pool "gpu"`) {
		t.Fatalf("job %s reason %q; want rejected again for its pool", j.Status, j.Reason)
	}
	if l := f.logs.Lines("level=WARN", "job rejected", "job=14002"); len(l) != 2 {
		t.Errorf("want the rejection said at each arrival, got %q", l)
	}
	if l := f.logs.Lines("level=WARN", "job rejected again after its readmission", "job=14002"); len(l) != 1 {
		t.Errorf("want the second rejection said as one again, got %q", l)
	}
	// The rejections alerted on count the job once.
	f.wantEvents("queued", "rejected", 1)
	f.wantEvents("queued", "rejected_again", 1)
	if s := f.Stats(domain.QueuePool).Visible + f.Stats(domain.QueueLaunch).Visible; s != 0 {
		t.Errorf("%d jobs sent to be served, want none", s)
	}
	f.inboxEmpty()
}

// A readmitted job whose delivery is dead-lettered is not marked to be
// sent by the reaper's sweep: it has no queue yet, and the reaper puts
// another delivery of it in the inbox instead.
func TestADeadLetteredDeliveryLeavesAReadmittedJobUnsent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second, MaxReceives: 2})
	ev := jobEvent{action: "queued", id: 14_003, runID: 163, labels: []string{"runs-on=163/pool=gpu"}}
	f.readmit(ev)
	f.in.Routing = withPool
	f.writes.failTransitions = map[int64]int{14_003: 2}
	f.deliver(ev)
	f.failingRounds(2)
	f.inboxEmpty()
	if dl := f.deadLetters(); len(dl) != 1 {
		t.Fatalf("%d dead letters, want the delivery", len(dl))
	}
	if j := f.Job(14_003); !j.Unrouted() || j.SendPending {
		t.Fatalf("job %s route %q send pending %v; want queued with no route, not pending", j.Status, j.Route, j.SendPending)
	}
	if n := f.resend(); n != 0 {
		t.Fatalf("the reaper's sweep sent %d jobs, want none", n)
	}
}
