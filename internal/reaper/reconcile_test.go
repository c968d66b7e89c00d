package reaper

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/testlog"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

func (x *fixture) machine(tags map[string]string) domain.CloudInstance {
	x.T.Helper()
	ms, err := x.cloud.Create(x.Ctx, domain.LaunchSpec{Runner: domain.RunnerSpec{Name: "r"}, ImageID: "ami-1", Count: 1, Tags: tags})
	if err != nil {
		x.T.Fatal(err)
	}
	return ms[0]
}

func (x *fixture) cycle() Report {
	x.T.Helper()
	rep, err := x.r.Cycle(x.Ctx)
	if err != nil {
		x.T.Fatal(err)
	}
	return rep
}

func TestOrphanMachineIsTerminatedAfterItsGrace(t *testing.T) {
	x := newFixture(t)
	ours := x.machine(map[string]string{domain.TagController: "ctl"})
	other := x.machine(map[string]string{domain.TagController: "someone-else"})
	known := x.machine(map[string]string{domain.TagController: "ctl"})
	x.createRows(domain.Instance{ID: "bp-1", CloudID: known.ID, State: domain.StateReady, Role: domain.RoleHot})
	if rep := x.cycle(); rep.Orphans != 0 {
		t.Fatalf("a fresh machine is not an orphan yet: %+v", rep)
	}
	x.Clock.Advance(10 * time.Minute)
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

// An orphan the cloud refuses to terminate (protected from termination)
// holds back neither the others of its batch nor the cycle, which does not
// fail: the others are terminated and counted, the refused one is counted
// at each refusal, logged once, and asked about again after a wait that
// doubles, until the protection is lifted.
func TestAnOrphanTheCloudRefusesToTerminateFailsNoCycle(t *testing.T) {
	x := newFixture(t)
	var log testlog.Buffer
	x.r.Log = slog.New(slog.NewTextHandler(&log, nil))
	var orphans []domain.CloudInstance
	for range 3 {
		orphans = append(orphans, x.machine(map[string]string{domain.TagController: "ctl"}))
	}
	protected := orphans[1]
	x.cloud.Protect(protected.ID, true)
	x.Clock.Advance(x.r.OrphanGrace)
	if rep := x.cycle(); rep.Orphans != 2 || rep.OrphansRefused != 1 {
		t.Fatalf("report %+v, want 2 orphans terminated and 1 refused", rep)
	}
	for _, m := range orphans {
		want := domain.CloudShuttingDown
		if m.ID == protected.ID {
			want = domain.CloudRunning
		}
		if got, _ := x.cloud.Get(m.ID); got.State != want && !(want == domain.CloudShuttingDown && got.State == domain.CloudTerminated) {
			t.Fatalf("machine %s is %s, want %s", m.ID, got.State, want)
		}
	}
	x.cloud.ResetCalls()
	calls := 0
	// Each cycle that asks again is one call; the wait doubles from a minute.
	for _, step := range []struct {
		pass time.Duration
		asks bool
	}{{time.Minute - time.Second, false}, {time.Second, true}, {time.Minute, false}, {time.Minute, true}} {
		x.Clock.Advance(step.pass)
		rep := x.cycle()
		if step.asks {
			calls++
		}
		if got, _ := x.terminateCalls(); got != calls || rep.OrphansRefused != btoi(step.asks) || rep.Orphans != 0 {
			t.Fatalf("after %s more, %d terminate calls, report %+v; want %d calls", step.pass, got, rep, calls)
		}
	}
	if refused, terminated := x.actions("orphan_refused"), x.actions("orphan"); refused != 3 || terminated != 2 {
		t.Fatalf("counted %g refusals and %g orphans terminated, want 3 and 2", refused, terminated)
	}
	if lines := log.Lines("level=WARN", "refuses to terminate", protected.ID, "OperationNotPermitted"); len(lines) != 1 || len(log.Lines("level=WARN", protected.ID)) != 2 {
		t.Fatalf("log %q; want the orphan's termination and its refusal logged once each", log.String())
	}

	x.cloud.Protect(protected.ID, false)
	x.Clock.Advance(4 * time.Minute)
	if rep := x.cycle(); rep.Orphans != 1 || rep.OrphansRefused != 0 {
		t.Fatalf("report %+v once the protection was lifted, want the orphan terminated", rep)
	}
}

func TestRowWhoseMachineIsGoneIsClosedAndItsJobRequeued(t *testing.T) {
	x := newFixture(t)
	m := x.machine(map[string]string{domain.TagController: "ctl"})
	x.CreateJob(domain.Job{ID: 7, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RoutePool, Pool: "p"})
	x.createRows(domain.Instance{ID: "bp-1", CloudID: m.ID, State: domain.StateClaimed, Job: "7", Role: domain.RoleHot})
	x.assign(7, "bp-1")
	if err := x.cloud.Terminate(x.Ctx, []string{m.ID}); err != nil {
		t.Fatal(err)
	}
	if rep := x.cycle(); rep.Gone != 0 {
		t.Fatalf("a row is closed only after the grace: %+v", rep)
	}
	x.Clock.Advance(2 * time.Minute)
	if rep := x.cycle(); rep.Gone != 1 {
		t.Fatalf("report %+v", rep)
	}
	in, _ := x.Store.GetInstance(x.Ctx, "bp-1")
	j, _ := x.Store.GetJob(x.Ctx, 7)
	if in.State != domain.StateTerminated || j.Status != domain.JobQueued || j.InstanceID != "" {
		t.Fatalf("instance %s, job %+v", in.State, j)
	}
	x.Clock.Advance(jobs.RequeueDelay)
	if st, _ := x.Queue.Stats(x.Ctx, domain.QueuePool); st.Visible != 1 {
		t.Fatalf("the job is not back in its queue: %+v", st)
	}
}

func TestDeadRunnersAreDeregisteredButNotOnesAnInstanceHolds(t *testing.T) {
	x := newFixture(t)
	dead, _ := x.gh.RegisterRunner(x.Ctx, scope, "bp-dead-1", []string{"x"})
	held, _ := x.gh.RegisterRunner(x.Ctx, scope, "bp-held-2", []string{"x"})
	foreign, _ := x.gh.RegisterRunner(x.Ctx, scope, "someone-elses", []string{"x"})
	x.createRows(domain.Instance{ID: "bp-held", State: domain.StateClaimed, Job: "9", RunnerName: "bp-held-2"})
	if rep := x.cycle(); rep.DeadRunners != 1 {
		t.Fatalf("report %+v", rep)
	}
	left, _ := x.gh.ListRunners(x.Ctx, scope)
	names := map[string]bool{}
	for _, r := range left {
		names[r.Name] = true
	}
	if names[dead.Name] || !names[held.Name] || !names[foreign.Name] {
		t.Fatalf("runners left: %v", names)
	}
}

// launchDuringListing is GitHub while a provisioner launches a machine:
// launch runs just before the runners are listed, after the cycle read its
// rows.
type launchDuringListing struct {
	domain.GitHub
	launch func()
}

func (g launchDuringListing) ListRunners(ctx context.Context, s domain.Scope) ([]domain.GitHubRunner, error) {
	if g.launch != nil {
		g.launch()
	}
	return g.GitHub.ListRunners(ctx, s)
}

// A runner is registered before its machine is launched, and its instance
// holds it only once the create call returned: until then a runner whose
// job is marked launched on its instance, or whose instance is bound to
// that job (pending for the create call, claimed from a resource pool), is
// not dead, though the row was written after the cycle read its rows. A
// runner whose instance no longer serves its job is, as is one whose job's
// launch mark names another instance or whose job no longer waits.
func TestARunnerRegisteredBeforeItsMachineIsNotDead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		row    domain.Instance // none when it has no state
		mark   string          // the instance job 100 is marked launched on
		status domain.JobStatus
		during bool // the row is written after the cycle read its rows
		dead   bool
	}{
		{"job marked, row not written yet", domain.Instance{}, "bp-new", domain.JobQueued, false, false},
		{"job marked for another launch", domain.Instance{}, "bp-other", domain.JobQueued, false, true},
		{"job cancelled", domain.Instance{}, "bp-new", domain.JobCompleted, false, true},
		{"row pending for the create call", domain.Instance{State: domain.StatePending, Job: "100"}, "bp-new", domain.JobQueued, false, false},
		{"row written during the cycle", domain.Instance{State: domain.StatePending, Job: "100"}, "bp-new", domain.JobQueued, true, false},
		{"reused instance claimed for the job", domain.Instance{State: domain.StateClaimed, Job: "100", CloudID: "i-1"}, "", domain.JobQueued, false, false},
		{"instance released since", domain.Instance{State: domain.StateReady, CloudID: "i-1"}, "", domain.JobCompleted, false, true},
		{"instance bound to another job", domain.Instance{State: domain.StateClaimed, Job: "101", CloudID: "i-1"}, "", domain.JobQueued, false, true},
		{"launch abandoned", domain.Instance{State: domain.StateTerminating, Job: "100"}, "bp-new", domain.JobQueued, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newFixture(t)
			x.CreateJob(domain.Job{ID: 100, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RouteLaunch})
			if tc.mark != "" {
				j, _ := x.Store.GetJob(x.Ctx, 100)
				m := domain.Lifecycle{}.LaunchFor(j, tc.mark)
				if _, err := x.Store.TransitionJob(x.Ctx, m.ID, m.Guard, m.Apply); err != nil {
					t.Fatal(err)
				}
			}
			if tc.status != domain.JobQueued {
				if _, err := x.Store.TransitionJob(x.Ctx, 100, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) { j.Status = tc.status }); err != nil {
					t.Fatal(err)
				}
			}
			row := tc.row
			row.ID, row.Role, row.Deadline = "bp-new", domain.RoleOnDemand, x.Clock.Now().Add(5*time.Minute)
			write := func() {
				if row.State == "" {
					return
				}
				if err := x.Store.CreateInstances(x.Ctx, []domain.Instance{row}); err != nil {
					t.Error(err)
				}
			}
			if tc.during {
				x.r.GitHub = launchDuringListing{GitHub: x.gh, launch: write}
			} else {
				write()
			}
			reg, err := x.gh.RegisterRunner(x.Ctx, scope, domain.RunnerName("bp-new", 100), []string{"x"})
			if err != nil {
				t.Fatal(err)
			}
			rep := x.cycle()
			left, _ := x.gh.ListRunners(x.Ctx, scope)
			if dead := len(left) == 0; dead != tc.dead || rep.DeadRunners != btoi(tc.dead) {
				t.Errorf("runner %s deleted %t (dead runners %d), want %t", reg.Name, dead, rep.DeadRunners, tc.dead)
			}
		})
	}
}

// Enterprise runners live in one place whatever repository a scope names
// for its jobs: a cycle over two repositories lists them once.
func TestEnterpriseRunnersAreListedOncePerCycle(t *testing.T) {
	x := newFixture(t)
	x.gh = ghsim.New(x.Clock, ghsim.Options{Enterprise: "megacorp"})
	x.r.GitHub = x.gh
	ent := domain.Scope{Enterprise: "megacorp"}
	x.r.Scopes = func(context.Context) []domain.Scope {
		return []domain.Scope{{Enterprise: "megacorp", Owner: "acme", Repo: "app"}, {Enterprise: "megacorp", Owner: "acme", Repo: "lib"}}
	}
	dead, _ := x.gh.RegisterRunner(x.Ctx, ent, "bp-dead-1", []string{"x"})
	if rep := x.cycle(); rep.DeadRunners != 1 {
		t.Fatalf("report %+v", rep)
	}
	if n := x.gh.Calls()[ghsim.OpListRunners]; n != 1 {
		t.Errorf("the enterprise's runners were listed %d times in a cycle, want once", n)
	}
	if n := x.gh.Calls()[ghsim.OpQueuedJobs]; n != 2 {
		t.Errorf("queued jobs were listed %d times, want once per repository", n)
	}
	if left, _ := x.gh.ListRunners(x.Ctx, ent); len(left) != 0 {
		t.Errorf("runner %s is still registered: %v", dead.Name, left)
	}
}

func TestQueuedJobWithoutAWebhookIsAdmitted(t *testing.T) {
	x := newFixture(t)
	x.gh.DropDeliveries(1)
	gj := x.gh.QueueJob(ghsim.JobSpec{Repo: "acme/app", Labels: []string{"runs-on/pool=p"}})
	if rep := x.cycle(); rep.Recovered != 1 {
		t.Fatalf("report %+v", rep)
	}
	msgs, err := x.Queue.Receive(x.Ctx, domain.QueueInbox, 10, time.Minute, 0)
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
	if st, _ := x.Queue.Stats(x.Ctx, domain.QueueInbox); st.Visible+st.InFlight != 1 {
		t.Fatalf("the job was admitted twice: %+v", st)
	}
}

// A queued job that is not ours (a GitHub-hosted one, another runner's,
// another environment's) is never recorded by the intake: admitting it
// would repeat every cycle, each time reading as a missed webhook.
func TestQueuedJobOfSomeoneElseIsNotAdmitted(t *testing.T) {
	x := newFixture(t)
	x.gh.DropDeliveries(2)
	x.gh.QueueJob(ghsim.JobSpec{Repo: "acme/app", Labels: []string{"ubuntu-latest"}})
	x.gh.QueueJob(ghsim.JobSpec{Repo: "acme/app", Labels: []string{"self-hosted", "linux"}})
	for range 2 {
		if rep := x.cycle(); rep.Recovered != 0 {
			t.Fatalf("someone else's jobs were admitted: %+v", rep)
		}
	}
	if st, _ := x.Queue.Stats(x.Ctx, domain.QueueInbox); st.Visible+st.InFlight != 0 {
		t.Fatalf("the inbox holds someone else's jobs: %+v", st)
	}
}

func TestAReconcilerThatCannotTellOurJobsIsRefused(t *testing.T) {
	x := newFixture(t)
	r := &Reconciler{Store: x.Store, Queue: x.Queue, Cloud: x.cloud, GitHub: x.gh, Clock: x.Clock, Log: x.Log, ControllerID: "ctl"}
	if err := r.Init(nil); err == nil || !strings.Contains(err.Error(), "Ours") {
		t.Fatalf("Init without Ours: %v", err)
	}
}

func TestRetentionBoundsTheStore(t *testing.T) {
	x := newFixture(t)
	x.createJobs(domain.Job{ID: 1, Status: domain.JobCompleted}, domain.Job{ID: 2, Status: domain.JobQueued})
	x.createRows(domain.Instance{ID: "old", State: domain.StateTerminated}, domain.Instance{ID: "live", State: domain.StateReady})
	x.Clock.Advance(72*time.Hour + time.Second)
	rep := x.cycle()
	if rep.JobsDeleted != 1 || rep.RowsDeleted != 1 {
		t.Fatalf("report %+v", rep)
	}
	if _, err := x.Store.GetJob(x.Ctx, 2); err != nil {
		t.Fatal("a queued job must never expire")
	}
	if _, err := x.Store.GetInstance(x.Ctx, "live"); err != nil {
		t.Fatal("a live row must never be deleted")
	}
}

func TestSilentAgentIsTerminatedAndItsUnstartedJobRequeued(t *testing.T) {
	x := newFixture(t)
	x.CreateJob(domain.Job{ID: 5, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RouteLaunch})
	rows := []domain.Instance{
		{ID: "talking", State: domain.StateRunning, Job: "1", JobStarted: true},
		{ID: "quiet", State: domain.StateClaimed, Job: "5"},
		{ID: "parked", State: domain.StateStopped},
	}
	x.createRows(rows...)
	x.assign(5, "quiet")
	x.Clock.Advance(2 * time.Minute)
	x.heard("talking")
	x.Clock.Advance(time.Minute + time.Second)
	rep := x.cycle()
	if rep.Silent != 1 {
		t.Fatalf("report %+v", rep)
	}
	x.wantInstanceStates(map[string]domain.State{"talking": domain.StateRunning, "quiet": domain.StateTerminating, "parked": domain.StateStopped})
	if j, _ := x.Store.GetJob(x.Ctx, 5); j.Status != domain.JobQueued || j.InstanceID != "" {
		t.Fatalf("the silent instance's job: %+v", j)
	}
}

// A control plane back from an outage longer than the silence allowance
// does not kill busy machines whose agents it could not hear: it gives
// them the allowance again from its start, and the agents' longest backoff
// besides (each tries again at the end of its own), then judges as usual.
func TestARestartedControlPlaneWaitsBeforeJudgingSilence(t *testing.T) {
	x := newFixture(t)
	rows := []domain.Instance{
		{ID: "busy", State: domain.StateRunning, Job: "1", JobStarted: true},
		{ID: "dead", State: domain.StateRunning, Job: "2", JobStarted: true},
	}
	x.createRows(rows...)
	x.Clock.Advance(time.Hour) // the control plane is down meanwhile
	x.r = x.started()          // and starts again
	if rep := x.cycle(); rep.Silent != 0 {
		t.Fatalf("%d instances judged silent at the restart, want none before their agents could report", rep.Silent)
	}
	x.Clock.Advance(time.Minute)
	x.heard("busy")
	x.cycle()
	x.Clock.Advance(time.Minute)
	x.cycle()
	// The allowance from the start has passed, but not the longest backoff
	// an agent may be in after it: one that comes back at its end is alive.
	x.Clock.Advance(time.Minute + time.Second)
	if rep := x.cycle(); rep.Silent != 0 {
		t.Fatalf("report %+v: judged silent before the agents' backoff after the restart was over", rep)
	}
	x.Clock.Advance(domain.AgentBackoffMax)
	if rep := x.cycle(); rep.Silent != 1 {
		t.Fatalf("report %+v, want the one that stayed silent", rep)
	}
	x.wantInstanceStates(map[string]domain.State{"busy": domain.StateRunning, "dead": domain.StateTerminating})
}

// A rejected job GitHub still lists as queued, and that no configuration
// has served for the grace since its rejection, has its run cancelled by
// the reaper when rejected jobs' runs are to be cancelled, and is left
// alone otherwise.
func TestARejectedJobStillQueuedHasItsRunCancelled(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancel=%t", cancel), func(t *testing.T) {
			x := newFixture(t)
			x.gh.DropDeliveries(1)
			gj := x.gh.QueueJob(ghsim.JobSpec{Repo: "acme/app", Labels: []string{"runs-on/pool=nowhere"}})
			x.CreateJob(domain.Job{ID: gj.ID, RunID: gj.RunID, Repo: "acme/app", Status: domain.JobRejected, Reason: "pool nowhere"})
			x.r.CancelRejected = cancel
			x.Clock.Advance(x.r.RejectedGrace) // rejected for its grace, and no configuration serves it
			rep := x.cycle()
			left, err := x.gh.QueuedJobs(x.Ctx, scope)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{false: 0, true: 1}[cancel]; rep.Cancelled != want || len(left) != 1-want {
				t.Fatalf("%d runs cancelled, %d jobs still queued on GitHub; want %d cancelled", rep.Cancelled, len(left), want)
			}
			if rep.Recovered != 0 {
				t.Fatalf("a recorded job was admitted again: %+v", rep)
			}
		})
	}
}

// A control plane stopped for longer than the silence allowance (a paused
// host, SIGSTOP) and resumed judges no agent silent for it: the heartbeats
// sent meanwhile wait in its sockets. It gives them the allowance again.
func TestAStalledControlPlaneWaitsBeforeJudgingSilence(t *testing.T) {
	x := newFixture(t)
	x.createRows(domain.Instance{ID: "busy", State: domain.StateRunning, Job: "1", JobStarted: true})
	for range 3 { // serving as usual
		x.heard("busy")
		x.Clock.Advance(time.Minute)
		x.cycle()
	}
	x.Clock.Advance(5 * time.Minute) // stopped: no cycle, no heartbeat taken
	if rep := x.cycle(); rep.Silent != 0 {
		t.Fatalf("%d instances judged silent right after the stall, want none", rep.Silent)
	}
	for range 4 { // its agent's beats come in again
		x.heard("busy")
		x.Clock.Advance(time.Minute)
		if rep := x.cycle(); rep.Silent != 0 {
			t.Fatalf("a beating agent judged silent: %+v", rep)
		}
	}
}
