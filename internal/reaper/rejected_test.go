package reaper

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/intake"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/testlog"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// gpuLabels name a pool the configuration gains during the tests.
var gpuLabels = []string{"runs-on/pool=gpu"}

// routingWorld is the reaper with an intake on the same store and queue,
// both on a configuration the test changes as a reload would.
type routingWorld struct {
	*fixture
	routing intake.Routing
	in      *intake.Intake
	log     *testlog.Buffer
}

func newRoutingWorld(t *testing.T) *routingWorld {
	t.Helper()
	w := &routingWorld{fixture: newFixture(t), log: &testlog.Buffer{}}
	small := domain.RunnerSpec{Name: "small", Image: "ubuntu24-full-x64", CPU: domain.Range{Min: 2, Max: 2}, RAM: domain.Range{Min: 8, Max: 8}}
	w.routing = intake.Routing{Environment: intake.DefaultEnvironment, Pools: map[string]domain.Pool{},
		Runners: map[string]domain.RunnerSpec{"small": small}}
	current := func() intake.Routing { return w.routing }
	var err error
	w.in, err = intake.New(intake.Deps{Store: w.Store, Queue: w.Queue, Clock: w.Clock, Log: w.Log, Routing: current},
		nil, intake.Options{Wait: -1, Linger: -1})
	if err != nil {
		t.Fatal(err)
	}
	// As the composition root wires it: the intake's decision on the
	// configuration in force.
	w.r.Takes = func(labels []string) bool {
		d := intake.Decide(labels, current())
		return d.Ours && d.Reject == ""
	}
	w.r.Log = slog.New(slog.NewTextHandler(w.log, nil))
	return w
}

// addPool puts pool gpu in force, as a reload of the settings file does.
func (w *routingWorld) addPool() {
	w.routing.Pools = map[string]domain.Pool{"gpu": {Name: "gpu", Environment: intake.DefaultEnvironment, Runner: "small"}}
}

// webhook queues a job on GitHub and has its queued webhook taken by the
// intake.
func (w *routingWorld) webhook(spec ghsim.JobSpec) domain.GitHubJob {
	w.T.Helper()
	gj := w.gh.QueueJob(spec)
	now := w.Clock.Now()
	if err := webhook.Enqueue(w.Ctx, w.Queue, now, "hook-"+domain.JobKey(gj.ID), webhook.QueuedPayload(gj, now)); err != nil {
		w.T.Fatal(err)
	}
	w.intakeStep()
	return gj
}

func (w *routingWorld) intakeStep() {
	w.T.Helper()
	if _, err := w.in.Step(w.Ctx); err != nil {
		w.T.Fatal(err)
	}
}

// poolQueue is the job ids in the pool queue.
func (w *routingWorld) poolQueue() []int64 {
	w.T.Helper()
	var ids []int64
	for _, m := range w.Peek(domain.QueuePool, 100) {
		id, err := jobs.Decode(m.Body)
		if err != nil {
			w.T.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// A job rejected because its pool was not in force when its webhook came
// is readmitted on the first cycle after a reload puts the pool in force:
// the intake routes it to the pool queue as any job, and its run, under
// --cancel-rejected, is not cancelled.
func TestAJobRejectedForAPoolNotYetInForceIsServedOnceItIs(t *testing.T) {
	w := newRoutingWorld(t)
	w.r.CancelRejected = true
	gj := w.webhook(ghsim.JobSpec{Repo: "acme/app", Labels: gpuLabels})
	rejected := w.Job(gj.ID)
	if rejected.Status != domain.JobRejected {
		t.Fatalf("job %s, want rejected before the pool is in force", rejected.Status)
	}
	w.Clock.Advance(30 * time.Second)
	if rep := w.cycle(); rep.Readmitted != 0 || rep.Cancelled != 0 {
		t.Fatalf("report %+v: acted on a job no configuration serves yet, within its grace", rep)
	}

	w.addPool()
	w.Clock.Advance(30 * time.Second)
	if rep := w.cycle(); rep.Readmitted != 1 || rep.Cancelled != 0 {
		t.Fatalf("report %+v, want the job readmitted", rep)
	}
	if j := w.Job(gj.ID); j.Status != domain.JobQueued || j.Reason != "" || !j.Unrouted() {
		t.Fatalf("job %s route %q reason %q; want queued with no route, its reason cleared", j.Status, j.Route, j.Reason)
	}
	if l := w.log.Lines("level=INFO", "readmitted: the configuration in force routes it",
		"job="+domain.JobKey(gj.ID), "gpu"); len(l) != 1 {
		t.Errorf("want one INFO with the job and its old reason, got %q", w.log.Lines("level=INFO"))
	}

	w.intakeStep()
	j := w.Job(gj.ID)
	if j.Status != domain.JobQueued || j.Route != domain.RoutePool || j.Pool != "gpu" || j.Runner != "small" {
		t.Fatalf("job %s route %q pool %q runner %q; want queued for pool gpu", j.Status, j.Route, j.Pool, j.Runner)
	}
	if got := w.poolQueue(); len(got) != 1 || got[0] != gj.ID {
		t.Fatalf("pool queue holds %v, want the job", got)
	}

	// Past the grace it is a job waiting for a runner like any other.
	w.Clock.Advance(w.r.RejectedGrace)
	if rep := w.cycle(); rep.Readmitted != 0 || rep.Cancelled != 0 {
		t.Fatalf("report %+v: a served job acted on again", rep)
	}
	if w.gh.Calls()[ghsim.OpCancelRun] != 0 {
		t.Fatal("the run of a readmitted job was cancelled")
	}
	if rec, _ := w.gh.Job(gj.ID); rec.Status != ghsim.StatusQueued {
		t.Fatalf("GitHub has the job %s, want still queued", rec.Status)
	}
}

// Under --cancel-rejected a rejected job's run is not cancelled within
// the grace that lets a reload serve it, and is once the grace is over if
// the configuration in force still does not serve it.
func TestARejectedJobsRunIsCancelledOnlyAfterItsGrace(t *testing.T) {
	w := newRoutingWorld(t)
	w.r.CancelRejected = true
	gj := w.webhook(ghsim.JobSpec{Repo: "acme/app", Labels: gpuLabels})
	for elapsed := time.Duration(0); elapsed < w.r.RejectedGrace; elapsed += 30 * time.Second {
		if rep := w.cycle(); rep.Cancelled != 0 {
			t.Fatalf("%v after the rejection: run cancelled within the grace", elapsed)
		}
		w.Clock.Advance(30 * time.Second)
	}
	if rep := w.cycle(); rep.Cancelled != 1 || rep.Readmitted != 0 {
		t.Fatalf("report %+v, want the run cancelled once the grace is over", rep)
	}
	if rec, _ := w.gh.Job(gj.ID); rec.Status == ghsim.StatusQueued {
		t.Fatal("GitHub still has the job queued")
	}
	if j := w.Job(gj.ID); j.Status != domain.JobRejected {
		t.Fatalf("job %s, want rejected", j.Status)
	}
}

// A job readmitted and then rejected again for the same labels (the
// cloud refused its launch) is readmitted again only once its new
// rejection has outlasted the grace, and at most maxReadmissions times;
// after that its run is cancelled, as routing it does not serve it. The
// bound is the job's: it holds though the reaper restarts (or its lease
// moves) between readmissions, and readmissions are not counted as failed
// attempts.
func TestAJobRejectedAgainAfterItsReadmissionsHasItsRunCancelled(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restarting between readmissions %v", restart), func(t *testing.T) {
			w := newRoutingWorld(t)
			w.r.CancelRejected = true
			w.addPool()
			gj := w.gh.QueueJob(ghsim.JobSpec{Repo: "acme/app", Labels: gpuLabels})
			w.CreateJob(domain.Job{ID: gj.ID, RunID: gj.RunID, Repo: "acme/app", Labels: gpuLabels, Status: domain.JobRejected,
				Reason: "the image does not resolve"})
			for n := 1; n <= maxReadmissions; n++ {
				if rep := w.cycle(); rep.Readmitted != 1 || rep.Cancelled != 0 {
					t.Fatalf("readmission %d: report %+v", n, rep)
				}
				w.intakeStep()
				j := w.Job(gj.ID)
				r := domain.Lifecycle{}.RejectJob(j, "the image does not resolve")
				if _, err := w.Store.TransitionJob(w.Ctx, r.ID, r.Guard, r.Apply); err != nil {
					t.Fatal(err)
				}
				if restart {
					if err := w.r.Init(nil); err != nil {
						t.Fatal(err)
					}
				}
				w.Clock.Advance(time.Minute)
				if rep := w.cycle(); rep.Readmitted != 0 || rep.Cancelled != 0 {
					t.Fatalf("after readmission %d: report %+v, want the new rejection given its grace", n, rep)
				}
				w.Clock.Advance(w.r.RejectedGrace)
			}
			if rep := w.cycle(); rep.Readmitted != 0 || rep.Cancelled != 1 {
				t.Fatalf("report %+v, want the run cancelled after %d readmissions", rep, maxReadmissions)
			}
			if j := w.Job(gj.ID); j.Readmissions != maxReadmissions || j.Attempts != 0 {
				t.Fatalf("job readmitted %d times, %d attempts; want %d and none", j.Readmissions, j.Attempts, maxReadmissions)
			}
		})
	}
}

// Only the rejected jobs GitHub still holds queued are looked at: one
// whose run GitHub ended is left as it is, though the configuration now
// serves it.
func TestARejectedJobGitHubNoLongerHasQueuedIsLeftAlone(t *testing.T) {
	w := newRoutingWorld(t)
	w.r.CancelRejected = true
	gone := w.webhook(ghsim.JobSpec{Repo: "acme/app", Labels: gpuLabels})
	still := w.webhook(ghsim.JobSpec{Repo: "acme/app", Labels: gpuLabels})
	if err := w.gh.CancelRun(w.Ctx, "acme/app", gone.RunID); err != nil {
		t.Fatal(err)
	}
	calls := w.gh.Calls()[ghsim.OpCancelRun]
	w.addPool()
	w.Clock.Advance(w.r.RejectedGrace)
	if rep := w.cycle(); rep.Readmitted != 1 || rep.Cancelled != 0 {
		t.Fatalf("report %+v, want the job still queued readmitted, and no other", rep)
	}
	if j := w.Job(gone.ID); j.Status != domain.JobRejected || !strings.Contains(j.Reason, "gpu") {
		t.Fatalf("job GitHub ended is %s %q, want left rejected", j.Status, j.Reason)
	}
	if j := w.Job(still.ID); j.Status != domain.JobQueued {
		t.Fatalf("job still queued on GitHub is %s, want readmitted", j.Status)
	}
	if got := w.gh.Calls()[ghsim.OpCancelRun]; got != calls {
		t.Fatalf("%d more CancelRun calls, want none", got-calls)
	}
}

// The rejected jobs of one run (a matrix naming a pool no configuration
// has) cancel it once a cycle, not once per job.
func TestRejectedJobsOfOneRunCancelItOnce(t *testing.T) {
	w := newRoutingWorld(t)
	w.r.CancelRejected = true
	first := w.webhook(ghsim.JobSpec{Repo: "acme/app", Labels: gpuLabels})
	w.webhook(ghsim.JobSpec{Repo: "acme/app", Labels: gpuLabels, RunID: first.RunID})
	w.Clock.Advance(w.r.RejectedGrace)
	if rep := w.cycle(); rep.Cancelled != 1 || w.gh.Calls()[ghsim.OpCancelRun] != 1 {
		t.Fatalf("report %+v, %d CancelRun calls; want one", rep, w.gh.Calls()[ghsim.OpCancelRun])
	}
}

// A readmitted job whose delivery was lost (the inbox refused it) is
// delivered again a cycle later, so that it is routed all the same, in a
// repository the scopes' rotation reaches this cycle or not.
func TestAReadmittedJobWhoseDeliveryWasLostIsDeliveredAgain(t *testing.T) {
	for _, away := range []bool{false, true} {
		t.Run(fmt.Sprintf("away from the rotation %v", away), func(t *testing.T) {
			w := newRoutingWorld(t)
			if away {
				w.awayFromRotation()
			}
			gj := w.webhook(ghsim.JobSpec{Repo: "acme/app", Labels: gpuLabels})
			w.addPool()
			w.Clock.Advance(time.Minute)
			if rep := w.cycle(); rep.Readmitted != 1 {
				t.Fatalf("report %+v, want the job readmitted", rep)
			}
			lost, err := w.Queue.Receive(w.Ctx, domain.QueueInbox, 10, time.Minute, 0)
			if err != nil || len(lost) != 1 {
				t.Fatalf("inbox held %d deliveries (%v), want the readmission's", len(lost), err)
			}
			if err := w.Queue.Delete(w.Ctx, domain.QueueInbox, []string{lost[0].Receipt}); err != nil {
				t.Fatal(err)
			}
			w.Clock.Advance(w.r.Interval)
			w.cycle()
			w.intakeStep()
			if j := w.Job(gj.ID); j.Route != domain.RoutePool || j.Pool != "gpu" {
				t.Fatalf("job %s route %q pool %q; want routed to pool gpu", j.Status, j.Route, j.Pool)
			}
		})
	}
}
