package reaper

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

// scope is the one repository the reconciler looks after.
var scope = domain.Scope{Owner: "acme", Repo: "app"}

// fixture is the reaper in a test world with a simulated cloud and GitHub:
// a reconciler for controller "ctl" and a terminator.
type fixture struct {
	*testworld.World
	cloud *sim.Cloud
	gh    *ghsim.GitHub
	r     *Reconciler
	term  *Terminator
	rows  int // recorded by rowsFor
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	t.Parallel() // each fixture has its own database, cloud and clock
	f := &fixture{World: testworld.New(t, t0)}
	f.cloud = f.NewCloud(sim.Options{})
	f.gh = ghsim.New(f.Clock, ghsim.Options{})
	f.r = f.reconciler()
	f.term = &Terminator{Store: f.Store, Queue: f.Queue, Cloud: f.cloud, Clock: f.Clock, Log: f.Log}
	return f
}

// reconciler returns a reconciler of the fixture's world, as another
// control plane sharing its store would run. It has run a while: the
// agents' backoffs after its start are over (see started).
func (f *fixture) reconciler() *Reconciler {
	f.T.Helper()
	r := f.started()
	r.heard.since = f.Clock.Now().Add(-domain.AgentBackoffMax)
	return r
}

// started returns a reconciler of the fixture's world that starts now, as
// a control plane does after a restart.
func (f *fixture) started() *Reconciler {
	f.T.Helper()
	r := &Reconciler{
		Store: f.Store, Queue: f.Queue, Cloud: f.cloud, GitHub: f.gh, Clock: f.Clock, Log: f.Log, ControllerID: "ctl",
		Scopes: func(context.Context) []domain.Scope { return []domain.Scope{scope} },
		Ours:   ours,
	}
	if err := r.Init(nil); err != nil {
		f.T.Fatal(err)
	}
	return r
}

// ours stands for the intake's routing decision: a job is ours when a
// label opens with runs-on.
func ours(jobLabels []string) bool {
	return slices.ContainsFunc(jobLabels, func(l string) bool { return strings.HasPrefix(l, "runs-on") })
}

// assign binds a queued job to an instance, as the loop that claimed the
// instance does.
func (f *fixture) assign(job int64, instanceID string) {
	f.T.Helper()
	if _, err := f.Store.TransitionJob(f.Ctx, job, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) {
		j.Status, j.InstanceID = domain.JobAssigned, instanceID
	}); err != nil {
		f.T.Fatal(err)
	}
}

// createJobs records jobs as they are, in one write.
func (f *fixture) createJobs(jobs ...domain.Job) {
	f.T.Helper()
	if _, err := f.Store.CreateJobs(f.Ctx, jobs); err != nil {
		f.T.Fatal(err)
	}
}

// createRows records instance rows as they are, in one write: unlike
// CreateInstance it fills in no cloud id, role, runner or deadline.
func (f *fixture) createRows(rows ...domain.Instance) {
	f.T.Helper()
	if err := f.Store.CreateInstances(f.Ctx, rows); err != nil {
		f.T.Fatal(err)
	}
}

// heard has the agent of instance id report, as a live agent does every
// minute.
func (f *fixture) heard(id string) {
	f.T.Helper()
	if err := f.Store.RecordHeartbeat(f.Ctx, id, f.Clock.Now()); err != nil {
		f.T.Fatal(err)
	}
}

// wantInstanceStates checks the state of each instance named.
func (f *fixture) wantInstanceStates(want map[string]domain.State) {
	f.T.Helper()
	for id, state := range want {
		if in := f.Instance(id); in.State != state {
			f.T.Errorf("%s is %s, want %s", id, in.State, state)
		}
	}
}
