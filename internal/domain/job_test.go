package domain

import (
	"testing"
	"time"
)

// A job waits for a runner while it is queued, unless GitHub holds it for
// an approval, and while it is assigned to an instance whose runner has
// not taken it; always from when GitHub queued it.
func TestJobWaitingSince(t *testing.T) {
	queued := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	later := queued.Add(time.Minute)
	for _, c := range []struct {
		name string
		job  Job
		want bool
	}{
		{"queued", Job{Status: JobQueued, QueuedAt: queued}, true},
		{"queued again after a failed create", Job{Status: JobQueued, QueuedAt: queued, Reason: "instance creation timed out"}, true},
		{"held for an approval", Job{Status: JobQueued, QueuedAt: queued, Reason: ReasonWaitingForApproval}, false},
		{"assigned, not started", Job{Status: JobAssigned, QueuedAt: queued, AssignedAt: later}, true},
		{"assigned, started", Job{Status: JobAssigned, QueuedAt: queued, AssignedAt: later, StartedAt: later}, false},
		{"running", Job{Status: JobRunning, QueuedAt: queued, StartedAt: later}, false},
		{"completed", Job{Status: JobCompleted, QueuedAt: queued}, false},
		{"rejected", Job{Status: JobRejected, QueuedAt: queued}, false},
		{"queued time unknown", Job{Status: JobQueued}, false},
	} {
		since, ok := c.job.WaitingSince()
		if ok != c.want || (ok && !since.Equal(queued)) {
			t.Errorf("%s: waiting %v since %v, want %v since %v", c.name, ok, since, c.want, queued)
		}
	}
	if !(Job{Status: JobQueued, Reason: ReasonWaitingForApproval}).HeldForApproval() ||
		(Job{Status: JobAssigned, Reason: ReasonWaitingForApproval}).HeldForApproval() {
		t.Error("HeldForApproval: only a queued job is held")
	}
}

// A machine launched for a job is an abandoned launch once it has booted
// without its runner for the handover allowance; one handed over, one
// not launched for a job, or one not booting is not.
func TestAbandonedLaunch(t *testing.T) {
	booted := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	due := booted.Add(HandoverAllowance)
	launched := Instance{ID: "bp-1", State: StateBooting, Role: RoleOnDemand, Job: "42", StateSince: booted}
	with := func(edit func(*Instance)) Instance { in := launched; edit(&in); return in }
	for _, c := range []struct {
		name string
		in   Instance
		at   time.Time
		want bool
	}{
		{"booting without its runner past the allowance", launched, due, true},
		{"within the allowance", launched, due.Add(-time.Second), false},
		{"handed its runner", with(func(in *Instance) { in.RunnerName = "bp-1-42" }), due, false},
		{"bound to no job", with(func(in *Instance) { in.Job = "" }), due, false},
		{"a pool member warming up", with(func(in *Instance) { in.Role, in.Job = RoleHot, "" }), due, false},
		{"still pending", with(func(in *Instance) { in.State = StatePending }), due, false},
		{"running", with(func(in *Instance) { in.State = StateRunning }), due, false},
	} {
		if got := AbandonedLaunch(c.in, c.at); got != c.want {
			t.Errorf("%s: abandoned %v, want %v", c.name, got, c.want)
		}
	}
}

// How a pool job is served follows from its instance as claimed: the
// instance's state says whether it must be started, and a running one
// that is no longer a member is a reusable instance back from a job.
func TestViaClaim(t *testing.T) {
	for _, c := range []struct {
		name string
		in   Instance
		want Via
	}{
		{"running hot member", Instance{State: StateReady, Role: RoleHot}, ViaHot},
		{"stopped-role member still warm", Instance{State: StateReady, Role: RoleStopped}, ViaHot},
		{"stopped member", Instance{State: StateStopped, Role: RoleStopped}, ViaStopped},
		{"reusable instance back from a job", Instance{State: StateReady, Role: RoleOnDemand}, ViaReuse},
	} {
		if got := ViaClaim(c.in); got != c.want {
			t.Errorf("%s: via %q, want %q", c.name, got, c.want)
		}
	}
	for v, member := range map[Via]bool{ViaHot: true, ViaStopped: true, ViaPool: true, ViaReuse: false, ViaCold: false, "": false} {
		if v.PoolMember() != member {
			t.Errorf("%q.PoolMember() = %v, want %v", v, !member, member)
		}
	}
}
