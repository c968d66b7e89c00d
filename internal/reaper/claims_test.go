package reaper

import (
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// booting is the row of a machine launched for job, booting within its
// deadline.
func (x *fixture) booting(id, job string) domain.Instance {
	return domain.Instance{ID: id, CloudID: "i-" + id, State: domain.StateBooting, Job: job, Role: domain.RoleOnDemand,
		Deadline: x.Clock.Now().Add(10 * time.Minute)}
}

// A claim its claimer left (it died between claiming the instance and
// binding the job) ends once the job is served elsewhere or over; a claim
// whose job is still unbound, or that is younger than StaleClaimAfter, is
// left alone.
func TestStaleClaimsEnd(t *testing.T) {
	x := newFixture(t)
	jobs := []domain.Job{
		{ID: 1, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RoutePool, Pool: "p"},
		{ID: 2, Repo: "acme/app", Status: domain.JobCompleted, Route: domain.RoutePool, Pool: "p"},
		{ID: 3, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RoutePool, Pool: "p"},
		{ID: 4, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RoutePool, Pool: "p"},
	}
	x.createJobs(jobs...)
	claimed := func(id, job string) domain.Instance {
		return domain.Instance{ID: id, CloudID: "i-" + id, State: domain.StateClaimed, Job: job, Role: domain.RoleHot,
			Deadline: x.Clock.Now().Add(time.Hour)}
	}
	x.createRows(claimed("bp-served-elsewhere", "1"), claimed("bp-ended", "2"), claimed("bp-unbound", "3"),
		claimed("bp-gone-job", "99"), claimed("bp-serving", "1"))
	x.assign(1, "bp-serving")
	x.Clock.Advance(time.Minute)
	x.createRows(claimed("bp-young", "1"))
	if rep := x.cycle(); rep.StaleClaims != 3 {
		t.Fatalf("%d stale claims ended, want 3: %+v", rep.StaleClaims, rep)
	}
	x.wantInstanceStates(map[string]domain.State{
		"bp-served-elsewhere": domain.StateTerminating, "bp-ended": domain.StateTerminating, "bp-gone-job": domain.StateTerminating,
		"bp-unbound": domain.StateClaimed, "bp-serving": domain.StateClaimed, "bp-young": domain.StateClaimed,
	})
	if j, _ := x.Store.GetJob(x.Ctx, 1); j.Status != domain.JobAssigned || j.InstanceID != "bp-serving" {
		t.Errorf("the job served elsewhere was touched: %+v", j)
	}
}

// A machine launched for a job whose provisioner died before the handover
// ends once the job is served by another machine, not at its booting
// deadline; one handed its runner whose job still waits is left to boot.
func TestAMachineBootingForAJobServedElsewhereEnds(t *testing.T) {
	x := newFixture(t)
	jobs := []domain.Job{
		{ID: 1, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RouteLaunch},
		{ID: 2, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RouteLaunch},
	}
	x.createJobs(jobs...)
	waiting := x.booting("bp-waiting", "2")
	waiting.RunnerName = domain.RunnerName(waiting.ID, 2)
	x.createRows(x.booting("bp-first", "1"), x.booting("bp-second", "1"), waiting)
	x.assign(1, "bp-second")
	x.Clock.Advance(time.Minute)
	if rep := x.cycle(); rep.StaleClaims != 1 {
		t.Fatalf("%d stale claims ended, want 1: %+v", rep.StaleClaims, rep)
	}
	x.wantInstanceStates(map[string]domain.State{
		"bp-first": domain.StateTerminating, "bp-second": domain.StateBooting, "bp-waiting": domain.StateBooting,
	})
}

// A machine launched for a job and left booting without its runner past
// the handover allowance is an abandoned launch: its provisioner stopped
// between the create call and the handover, which follows the fleet at
// once. It ends while its job still waits, not at its booting deadline;
// one within the allowance, or handed its runner, is left to boot.
func TestAnAbandonedLaunchEnds(t *testing.T) {
	x := newFixture(t)
	jobs := []domain.Job{
		{ID: 1, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RouteLaunch, LaunchedOn: "bp-abandoned"},
		{ID: 2, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RouteLaunch, LaunchedOn: "bp-handed-over"},
		{ID: 3, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RouteLaunch, LaunchedOn: "bp-just-booted"},
	}
	x.createJobs(jobs...)
	handed := x.booting("bp-handed-over", "2")
	handed.RunnerName = domain.RunnerName(handed.ID, 2)
	x.createRows(x.booting("bp-abandoned", "1"), handed)
	x.Clock.Advance(domain.HandoverAllowance / 2)
	x.createRows(x.booting("bp-just-booted", "3"))
	x.Clock.Advance(domain.HandoverAllowance / 2)
	if rep := x.cycle(); rep.StaleClaims != 1 {
		t.Fatalf("%d stale claims ended, want 1: %+v", rep.StaleClaims, rep)
	}
	x.wantInstanceStates(map[string]domain.State{
		"bp-abandoned": domain.StateTerminating, "bp-handed-over": domain.StateBooting, "bp-just-booted": domain.StateBooting,
	})
	if in := x.Instance("bp-abandoned"); !strings.Contains(in.Reason, "never handed its runner") {
		t.Errorf("abandoned launch ended for %q", in.Reason)
	}
	if j, _ := x.Store.GetJob(x.Ctx, 1); j.Status != domain.JobQueued || j.InstanceID != "" {
		t.Errorf("the abandoned launch's job was touched: %+v", j)
	}
}
