package reaper

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
)

// elsewhere is a repository the scopes' rotation reaches this cycle,
// where the rejected jobs of the tests below are not.
var elsewhere = domain.Scope{Owner: "acme", Repo: "docs"}

// awayFromRotation has the reconciler look at a scope other than the
// jobs' repository, as the rotation of many repositories mostly does.
func (w *routingWorld) awayFromRotation() {
	w.r.Scopes = func(context.Context) []domain.Scope { return []domain.Scope{elsewhere} }
}

// A rejected job in a repository the scopes' rotation does not reach is
// readmitted on the first cycle after the configuration in force routes
// it, looked up on its own.
func TestARejectedJobOutsideTheRotatedScopesIsReadmitted(t *testing.T) {
	w := newRoutingWorld(t)
	w.awayFromRotation()
	gj := w.webhook(ghsim.JobSpec{Repo: "acme/app", Labels: gpuLabels})
	w.Clock.Advance(30 * time.Second)
	if rep := w.cycle(); rep.Readmitted != 0 || w.gh.Calls()[ghsim.OpGetJob] != 0 {
		t.Fatalf("report %+v, %d look-ups: a job nothing is due for was looked up", rep, w.gh.Calls()[ghsim.OpGetJob])
	}
	w.addPool()
	w.Clock.Advance(30 * time.Second)
	if rep := w.cycle(); rep.Readmitted != 1 {
		t.Fatalf("report %+v, want the job readmitted though its repository was not looked at", rep)
	}
	w.intakeStep()
	if j := w.Job(gj.ID); j.Route != domain.RoutePool || j.Pool != "gpu" {
		t.Fatalf("job %s route %q pool %q; want routed to pool gpu", j.Status, j.Route, j.Pool)
	}
}

// Under --cancel-rejected, a rejected job in a repository the rotation does
// not reach has its run cancelled once its grace is over, not when the
// rotation comes round to it.
func TestARejectedJobOutsideTheRotatedScopesHasItsRunCancelledOnTime(t *testing.T) {
	w := newRoutingWorld(t)
	w.awayFromRotation()
	w.r.CancelRejected = true
	gj := w.webhook(ghsim.JobSpec{Repo: "acme/app", Labels: gpuLabels})
	w.Clock.Advance(w.r.RejectedGrace - time.Second)
	if rep := w.cycle(); rep.Cancelled != 0 {
		t.Fatalf("report %+v: run cancelled within the grace", rep)
	}
	w.Clock.Advance(time.Second)
	if rep := w.cycle(); rep.Cancelled != 1 {
		t.Fatalf("report %+v, want the run cancelled once the grace is over", rep)
	}
	if rec, _ := w.gh.Job(gj.ID); rec.Status == ghsim.StatusQueued {
		t.Fatal("GitHub still has the job queued")
	}
	// GitHub has ended it: it is not asked about again.
	w.Clock.Advance(time.Minute)
	w.cycle()
	looked := w.gh.Calls()[ghsim.OpGetJob]
	w.Clock.Advance(time.Minute)
	w.cycle()
	if got := w.gh.Calls()[ghsim.OpGetJob]; got != looked {
		t.Fatalf("%d more look-ups of a job GitHub ended", got-looked)
	}
}

// A job a scope of the cycle lists is dealt with there, and not looked up
// again nor acted on twice; the look-ups of the others are bounded a cycle,
// the rest left to the next, the oldest rejection first.
func TestRejectedJobLookUpsAreBoundedAndNeverRepeatAScope(t *testing.T) {
	w := newRoutingWorld(t)
	w.r.CancelRejected = true
	listed := w.webhook(ghsim.JobSpec{Repo: "acme/app", Labels: gpuLabels})
	var away []domain.GitHubJob
	for i := range rejectedPerCycle + 5 {
		away = append(away, w.webhook(ghsim.JobSpec{Repo: fmt.Sprintf("acme/repo%d", i), Labels: gpuLabels}))
		w.Clock.Advance(time.Second)
	}
	w.Clock.Advance(w.r.RejectedGrace)
	if rep := w.cycle(); rep.Cancelled != rejectedPerCycle+1 {
		t.Fatalf("report %+v, want the listed job's run and %d others cancelled", rep, rejectedPerCycle)
	}
	if got := w.gh.Calls()[ghsim.OpGetJob]; got != rejectedPerCycle {
		t.Fatalf("%d look-ups, want %d: the listed job is not looked up", got, rejectedPerCycle)
	}
	if got := w.gh.Calls()[ghsim.OpCancelRun]; got != rejectedPerCycle+1 {
		t.Fatalf("%d runs cancelled, want each once", got)
	}
	if rec, _ := w.gh.Job(listed.ID); rec.Status == ghsim.StatusQueued {
		t.Fatal("the listed job's run was not cancelled")
	}
	for _, gj := range away[rejectedPerCycle:] {
		if rec, _ := w.gh.Job(gj.ID); rec.Status != ghsim.StatusQueued {
			t.Fatalf("job %d of the newest rejections cancelled before older ones", gj.ID)
		}
	}
	w.Clock.Advance(time.Minute)
	if rep := w.cycle(); rep.Cancelled != 5 {
		t.Fatalf("report %+v, want the 5 left over cancelled on the next cycle", rep)
	}
}
