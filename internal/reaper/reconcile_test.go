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
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

type recon struct {
	t     *testing.T
	ctx   context.Context
	clk   *clock.Virtual
	store *sqlite.Store
	queue *sqlite.Queue
	cloud *sim.Cloud
	gh    *ghsim.GitHub
	r     *Reconciler
}

var scope = domain.Scope{Owner: "acme", Repo: "app"}

func newRecon(t *testing.T) *recon {
	t.Helper()
	x := &recon{t: t, ctx: context.Background(), clk: clock.NewVirtual(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))}
	x.store, x.queue = sqlitetest.Open(t, x.clk)
	st := x.store
	x.cloud = sim.New(x.clk, sim.Options{})
	t.Cleanup(x.cloud.Close)
	x.gh = ghsim.New(x.clk, ghsim.Options{})
	x.r = &Reconciler{
		Store: st, Queue: x.queue, Cloud: x.cloud, GitHub: x.gh, Clock: x.clk,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), ControllerID: "ctl",
		Scopes: func(context.Context) []domain.Scope { return []domain.Scope{scope} },
	}
	if err := x.r.Init(nil); err != nil {
		t.Fatal(err)
	}
	return x
}

func (x *recon) machine(tags map[string]string) domain.CloudInstance {
	x.t.Helper()
	ms, err := x.cloud.Create(x.ctx, domain.LaunchSpec{Runner: domain.RunnerSpec{Name: "r"}, ImageID: "ami-1", Count: 1, Tags: tags})
	if err != nil {
		x.t.Fatal(err)
	}
	return ms[0]
}

func (x *recon) cycle() Report {
	x.t.Helper()
	rep, err := x.r.Cycle(x.ctx)
	if err != nil {
		x.t.Fatal(err)
	}
	return rep
}

func TestOrphanMachineIsTerminatedAfterItsGrace(t *testing.T) {
	x := newRecon(t)
	ours := x.machine(map[string]string{domain.TagController: "ctl"})
	other := x.machine(map[string]string{domain.TagController: "someone-else"})
	known := x.machine(map[string]string{domain.TagController: "ctl"})
	if err := x.store.CreateInstances(x.ctx, []domain.Instance{{ID: "bp-1", CloudID: known.ID, State: domain.StateReady, Role: domain.RoleHot}}); err != nil {
		t.Fatal(err)
	}
	if rep := x.cycle(); rep.Orphans != 0 {
		t.Fatalf("a fresh machine is not an orphan yet: %+v", rep)
	}
	x.clk.Advance(10 * time.Minute)
	if rep := x.cycle(); rep.Orphans != 1 {
		t.Fatalf("report %+v", rep)
	}
	if m, _ := x.cloud.Get(ours.ID); m.State != domain.CloudShuttingDown && m.State != domain.CloudTerminated {
		t.Fatalf("orphan is %s", m.State)
	}
	for _, id := range []string{other.ID, known.ID} {
		if m, _ := x.cloud.Get(id); m.State != domain.CloudRunning {
			t.Fatalf("%s must be left alone, is %s", id, m.State)
		}
	}
}

func TestRowWhoseMachineIsGoneIsClosedAndItsJobRequeued(t *testing.T) {
	x := newRecon(t)
	m := x.machine(map[string]string{domain.TagController: "ctl"})
	job := domain.Job{ID: 7, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RoutePool, Pool: "p"}
	if _, err := x.store.CreateJobs(x.ctx, []domain.Job{job}); err != nil {
		t.Fatal(err)
	}
	if err := x.store.CreateInstances(x.ctx, []domain.Instance{{ID: "bp-1", CloudID: m.ID, State: domain.StateClaimed, Job: "7", Role: domain.RoleHot}}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.store.TransitionJob(x.ctx, 7, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) {
		j.Status, j.InstanceID = domain.JobAssigned, "bp-1"
	}); err != nil {
		t.Fatal(err)
	}
	if err := x.cloud.Terminate(x.ctx, []string{m.ID}); err != nil {
		t.Fatal(err)
	}
	if rep := x.cycle(); rep.Gone != 0 {
		t.Fatalf("a row is closed only after the grace: %+v", rep)
	}
	x.clk.Advance(2 * time.Minute)
	if rep := x.cycle(); rep.Gone != 1 {
		t.Fatalf("report %+v", rep)
	}
	in, _ := x.store.GetInstance(x.ctx, "bp-1")
	j, _ := x.store.GetJob(x.ctx, 7)
	if in.State != domain.StateTerminated || j.Status != domain.JobQueued || j.InstanceID != "" {
		t.Fatalf("instance %s, job %+v", in.State, j)
	}
	x.clk.Advance(jobs.RequeueDelay)
	if st, _ := x.queue.Stats(x.ctx, domain.QueuePool); st.Visible != 1 {
		t.Fatalf("the job is not back in its queue: %+v", st)
	}
}

func TestDeadRunnersAreDeregisteredButNotOnesAnInstanceHolds(t *testing.T) {
	x := newRecon(t)
	dead, _ := x.gh.RegisterRunner(x.ctx, scope, "bp-dead-1", []string{"x"})
	held, _ := x.gh.RegisterRunner(x.ctx, scope, "bp-held-2", []string{"x"})
	foreign, _ := x.gh.RegisterRunner(x.ctx, scope, "someone-elses", []string{"x"})
	if err := x.store.CreateInstances(x.ctx, []domain.Instance{{ID: "bp-held", State: domain.StateClaimed, Job: "9", RunnerName: "bp-held-2"}}); err != nil {
		t.Fatal(err)
	}
	if rep := x.cycle(); rep.DeadRunners != 1 {
		t.Fatalf("report %+v", rep)
	}
	left, _ := x.gh.ListRunners(x.ctx, scope)
	names := map[string]bool{}
	for _, r := range left {
		names[r.Name] = true
	}
	if names[dead.Name] || !names[held.Name] || !names[foreign.Name] {
		t.Fatalf("runners left: %v", names)
	}
}

// Enterprise runners live in one place whatever repository a scope names
// for its jobs: a cycle over two repositories lists them once.
func TestEnterpriseRunnersAreListedOncePerCycle(t *testing.T) {
	x := newRecon(t)
	x.gh = ghsim.New(x.clk, ghsim.Options{Enterprise: "megacorp"})
	x.r.GitHub = x.gh
	ent := domain.Scope{Enterprise: "megacorp"}
	x.r.Scopes = func(context.Context) []domain.Scope {
		return []domain.Scope{{Enterprise: "megacorp", Owner: "acme", Repo: "app"}, {Enterprise: "megacorp", Owner: "acme", Repo: "lib"}}
	}
	dead, _ := x.gh.RegisterRunner(x.ctx, ent, "bp-dead-1", []string{"x"})
	if rep := x.cycle(); rep.DeadRunners != 1 {
		t.Fatalf("report %+v", rep)
	}
	if n := x.gh.Calls()[ghsim.OpListRunners]; n != 1 {
		t.Errorf("the enterprise's runners were listed %d times in a cycle, want once", n)
	}
	if n := x.gh.Calls()[ghsim.OpQueuedJobs]; n != 2 {
		t.Errorf("queued jobs were listed %d times, want once per repository", n)
	}
	if left, _ := x.gh.ListRunners(x.ctx, ent); len(left) != 0 {
		t.Errorf("runner %s is still registered: %v", dead.Name, left)
	}
}

func TestQueuedJobWithoutAWebhookIsAdmitted(t *testing.T) {
	x := newRecon(t)
	x.gh.DropDeliveries(1)
	gj := x.gh.QueueJob(ghsim.JobSpec{Repo: "acme/app", Labels: []string{"runs-on/pool=p"}})
	if rep := x.cycle(); rep.Recovered != 1 {
		t.Fatalf("report %+v", rep)
	}
	msgs, err := x.queue.Receive(x.ctx, domain.QueueInbox, 10, time.Minute, 0)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("inbox: %d messages, %v", len(msgs), err)
	}
	d, err := webhook.DecodeDelivery(msgs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := webhook.ParseWorkflowJob(d.Payload)
	if err != nil || ev.Job.ID != gj.ID || ev.Action != "queued" || ev.Repo != "acme/app" {
		t.Fatalf("synthetic delivery %+v %v", ev, err)
	}
	if rep := x.cycle(); rep.Recovered != 1 {
		t.Fatalf("a second look must stay harmless (deduplicated): %+v", rep)
	}
	if st, _ := x.queue.Stats(x.ctx, domain.QueueInbox); st.Visible+st.InFlight != 1 {
		t.Fatalf("the job was admitted twice: %+v", st)
	}
}

func TestRetentionBoundsTheStore(t *testing.T) {
	x := newRecon(t)
	if _, err := x.store.CreateJobs(x.ctx, []domain.Job{{ID: 1, Status: domain.JobCompleted}, {ID: 2, Status: domain.JobQueued}}); err != nil {
		t.Fatal(err)
	}
	if err := x.store.CreateInstances(x.ctx, []domain.Instance{{ID: "old", State: domain.StateTerminated}, {ID: "live", State: domain.StateReady}}); err != nil {
		t.Fatal(err)
	}
	x.clk.Advance(72*time.Hour + time.Second)
	rep := x.cycle()
	if rep.JobsDeleted != 1 || rep.RowsDeleted != 1 {
		t.Fatalf("report %+v", rep)
	}
	if _, err := x.store.GetJob(x.ctx, 2); err != nil {
		t.Fatal("a queued job must never expire")
	}
	if _, err := x.store.GetInstance(x.ctx, "live"); err != nil {
		t.Fatal("a live row must never be deleted")
	}
}

func TestSilentAgentIsTerminatedAndItsUnstartedJobRequeued(t *testing.T) {
	x := newRecon(t)
	if _, err := x.store.CreateJobs(x.ctx, []domain.Job{{ID: 5, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RouteLaunch}}); err != nil {
		t.Fatal(err)
	}
	rows := []domain.Instance{
		{ID: "talking", State: domain.StateRunning, Job: "1", JobStarted: true},
		{ID: "quiet", State: domain.StateClaimed, Job: "5"},
		{ID: "parked", State: domain.StateStopped},
	}
	if err := x.store.CreateInstances(x.ctx, rows); err != nil {
		t.Fatal(err)
	}
	if _, err := x.store.TransitionJob(x.ctx, 5, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) {
		j.Status, j.InstanceID = domain.JobAssigned, "quiet"
	}); err != nil {
		t.Fatal(err)
	}
	x.clk.Advance(2 * time.Minute)
	if err := x.store.RecordHeartbeat(x.ctx, "talking", x.clk.Now()); err != nil {
		t.Fatal(err)
	}
	x.clk.Advance(time.Minute + time.Second)
	rep := x.cycle()
	if rep.Silent != 1 {
		t.Fatalf("report %+v", rep)
	}
	for id, want := range map[string]domain.State{"talking": domain.StateRunning, "quiet": domain.StateTerminating, "parked": domain.StateStopped} {
		if in, _ := x.store.GetInstance(x.ctx, id); in.State != want {
			t.Errorf("%s is %s, want %s", id, in.State, want)
		}
	}
	if j, _ := x.store.GetJob(x.ctx, 5); j.Status != domain.JobQueued || j.InstanceID != "" {
		t.Fatalf("the silent instance's job: %+v", j)
	}
}
