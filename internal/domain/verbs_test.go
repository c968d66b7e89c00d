package domain_test

import (
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

var (
	now = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	lc  = domain.NewLifecycle(domain.Deadlines{})
	reg = domain.RunnerRegistration{RunnerID: 9, Name: "bp-1-42", JITConfig: "jit"}
)

// apply runs a verb's request on in as a store would.
func apply(t *testing.T, in domain.Instance, r domain.TransitionRequest) domain.Instance {
	t.Helper()
	if r.ID != in.ID {
		t.Fatalf("request for %q, want %q", r.ID, in.ID)
	}
	out, err := domain.ApplyTransition(in, r.Guard, now, r.Apply)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return out
}

// Every instance verb leads where its name says, with that state's
// deadline, through a transition the state machine allows.
func TestInstanceVerbs(t *testing.T) {
	d := domain.DefaultDeadlines()
	bound := func(s domain.State) domain.Instance {
		return domain.Instance{ID: "bp-1", State: s, Job: "42", Version: 3, RunnerName: "bp-1-42", RunnerConfig: "jit"}
	}
	idle := func(s domain.State) domain.Instance { return domain.Instance{ID: "bp-1", State: s, Version: 3} }
	later := now.Add(time.Hour)
	cases := []struct {
		name  string
		in    domain.Instance
		req   func(domain.Instance) domain.TransitionRequest
		check func(domain.Instance) bool
	}{
		{"launched", domain.Instance{ID: "bp-1", State: domain.StatePending, Version: 1},
			func(in domain.Instance) domain.TransitionRequest {
				return lc.Launched(in, domain.CloudInstance{ID: "i-1", InstanceType: "m7a.large"}, "h", now)
			},
			func(o domain.Instance) bool {
				return o.State == domain.StateBooting && o.CloudID == "i-1" && o.BootstrapHash == "h" &&
					o.Deadline.Equal(now.Add(d.Booting)) && o.InstanceType == "m7a.large"
			}},
		{"warm", idle(domain.StateBooting), func(in domain.Instance) domain.TransitionRequest { return lc.Warm(in, later) },
			func(o domain.Instance) bool { return o.State == domain.StateReady && o.Deadline.Equal(later) }},
		{"stop", idle(domain.StateReady), func(in domain.Instance) domain.TransitionRequest { return lc.Stop(in, now) },
			func(o domain.Instance) bool { return o.State == domain.StateStopping }},
		{"stopped", idle(domain.StateStopping), func(in domain.Instance) domain.TransitionRequest { return lc.Stopped(in, now) },
			func(o domain.Instance) bool { return o.State == domain.StateStopped && o.RunningSince.IsZero() }},
		{"convert to stopped", func() domain.Instance { in := idle(domain.StateReady); in.Role = domain.RoleHot; return in }(),
			func(in domain.Instance) domain.TransitionRequest { return lc.ConvertToStopped(in, now) },
			func(o domain.Instance) bool {
				return o.State == domain.StateStopping && o.Role == domain.RoleStopped && o.Deadline.Equal(now.Add(d.Stopping))
			}},
		{"convert to hot", func() domain.Instance { in := idle(domain.StateStopped); in.Role = domain.RoleStopped; return in }(),
			func(in domain.Instance) domain.TransitionRequest { return lc.ConvertToHot(in, now) },
			func(o domain.Instance) bool {
				return o.State == domain.StateBooting && o.Role == domain.RoleHot && o.RunningSince.Equal(now) &&
					o.Deadline.Equal(now.Add(d.Booting))
			}},
		{"start failed", func() domain.Instance {
			in := idle(domain.StateBooting)
			in.Role, in.RunningSince = domain.RoleHot, now
			return in
		}(),
			func(in domain.Instance) domain.TransitionRequest {
				return lc.StartFailed(in, domain.Instance{ID: "bp-1", State: domain.StateStopped, Role: domain.RoleStopped, Deadline: later})
			},
			func(o domain.Instance) bool {
				return o.State == domain.StateStopped && o.Role == domain.RoleStopped && o.Deadline.Equal(later) && o.RunningSince.IsZero()
			}},
		{"claim", idle(domain.StateStopped), func(in domain.Instance) domain.TransitionRequest { return lc.Claim(in, "42", now) },
			func(o domain.Instance) bool {
				return o.State == domain.StateClaimed && o.Job == "42" && o.Deadline.Equal(now.Add(d.Claimed))
			}},
		{"unclaim", bound(domain.StateClaimed),
			func(in domain.Instance) domain.TransitionRequest { return lc.Unclaim(in, domain.StateStopped, later) },
			func(o domain.Instance) bool {
				return o.State == domain.StateStopped && o.Job == "" && o.RunnerConfig == "" && o.Deadline.Equal(later)
			}},
		{"give runner", domain.Instance{ID: "bp-1", State: domain.StateClaimed, Job: "42"},
			func(in domain.Instance) domain.TransitionRequest { return lc.GiveRunner(in, reg) },
			func(o domain.Instance) bool { return o.RunnerName == reg.Name && o.RunnerConfig == reg.JITConfig }},
		{"register", bound(domain.StateClaimed), func(in domain.Instance) domain.TransitionRequest { return lc.Register(in, now) },
			func(o domain.Instance) bool {
				return o.State == domain.StateRunning && o.Deadline.Equal(now.Add(d.Running))
			}},
		{"job started", bound(domain.StateRunning), lc.JobStarted,
			func(o domain.Instance) bool { return o.JobStarted }},
		{"release for reuse", bound(domain.StateRunning), func(in domain.Instance) domain.TransitionRequest { return lc.Release(in, "", now) },
			func(o domain.Instance) bool {
				return o.State == domain.StateReleasing && o.Job == "" && o.RunnerConfig == "" && o.JobsServed == 1
			}},
		{"release to retire", bound(domain.StateRunning),
			func(in domain.Instance) domain.TransitionRequest { return lc.Release(in, "job done", now) },
			func(o domain.Instance) bool {
				return o.State == domain.StateTerminating && o.Reason == "job done" && o.Job == ""
			}},
		{"pool", idle(domain.StateReleasing), func(in domain.Instance) domain.TransitionRequest { return lc.Pool(in, later) },
			func(o domain.Instance) bool { return o.State == domain.StateReady && o.Deadline.Equal(later) }},
		{"pool gives a member's machine back to the resource pool, not to its pool's count",
			func() domain.Instance {
				in := idle(domain.StateReleasing)
				in.Pool, in.Role, in.JobsServed = "medium", domain.RoleHot, 1
				return in
			}(),
			func(in domain.Instance) domain.TransitionRequest { return lc.Pool(in, later) },
			func(o domain.Instance) bool {
				return o.State == domain.StateReady && o.Role == domain.RoleOnDemand && o.Pool == "medium" &&
					o.Deadline.Equal(later) && o.JobsServed == 1
			}},
		{"fail unbinds an unstarted job", bound(domain.StateClaimed),
			func(in domain.Instance) domain.TransitionRequest { return lc.Fail(in, "boom", now) },
			func(o domain.Instance) bool { return o.State == domain.StateError && o.Job == "" && o.Reason == "boom" }},
		{"terminate keeps a started job", func() domain.Instance { in := bound(domain.StateRunning); in.JobStarted = true; return in }(),
			func(in domain.Instance) domain.TransitionRequest { return lc.Terminate(in, "deadline", now) },
			func(o domain.Instance) bool { return o.State == domain.StateTerminating && o.Job == "42" }},
		{"terminate again keeps the deadline", domain.Instance{ID: "bp-1", State: domain.StateTerminating, Deadline: later},
			func(in domain.Instance) domain.TransitionRequest { return lc.Terminate(in, "again", now) },
			func(o domain.Instance) bool { return o.Reason == "again" && o.Deadline.Equal(later) }},
		{"interrupt unbinds an unstarted job", bound(domain.StateClaimed),
			func(in domain.Instance) domain.TransitionRequest { return lc.Interrupt(in, false, "spot", later) },
			func(o domain.Instance) bool {
				return o.State == domain.StateTerminating && o.Job == "" && o.Reason == "spot" && o.Deadline.Equal(later)
			}},
		{"interrupt keeps a job GitHub saw start", bound(domain.StateRunning),
			func(in domain.Instance) domain.TransitionRequest { return lc.Interrupt(in, true, "spot", later) },
			func(o domain.Instance) bool {
				return o.State == domain.StateTerminating && o.Job == "42" && o.JobStarted
			}},
		{"leave runs a started job on until the cloud takes the machine", bound(domain.StateClaimed),
			func(in domain.Instance) domain.TransitionRequest { return lc.Leave(in, "spot", later) },
			func(o domain.Instance) bool {
				return o.State == domain.StateRunning && o.Job == "42" && o.JobStarted && o.Reason == "spot" &&
					o.Deadline.Equal(later) && o.Leaving() && o.Detached()
			}},
		{"leave always gives a reason", bound(domain.StateRunning),
			func(in domain.Instance) domain.TransitionRequest { return lc.Leave(in, "", later) },
			func(o domain.Instance) bool { return o.Leaving() && o.Deadline.Equal(later) }},
		{"close", idle(domain.StateTerminating), lc.Close,
			func(o domain.Instance) bool { return o.State == domain.StateTerminated && o.Deadline.IsZero() }},
		{"unbind shortens a waiting runner's deadline", func() domain.Instance { in := bound(domain.StateClaimed); in.Deadline = later; return in }(),
			func(in domain.Instance) domain.TransitionRequest { return lc.Unbind(in, now.Add(time.Minute)) },
			func(o domain.Instance) bool { return o.Job == "" && o.Deadline.Equal(now.Add(time.Minute)) }},
		{"unbind for a foreign job lengthens the deadline", func() domain.Instance {
			in := bound(domain.StateRunning)
			in.Deadline = now.Add(time.Minute)
			return in
		}(),
			func(in domain.Instance) domain.TransitionRequest { return lc.UnbindForeign(in, later) },
			func(o domain.Instance) bool {
				return o.Job == "" && o.State == domain.StateRunning && o.Deadline.Equal(later)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := apply(t, tc.in, tc.req(tc.in))
			if !tc.check(out) {
				t.Fatalf("after %s: %+v", tc.name, out)
			}
		})
	}
}

// Only an instance Leave left running is leaving service: a running one
// serves its job, and one terminating or failed has left already.
func TestLeaving(t *testing.T) {
	for _, in := range []domain.Instance{
		{State: domain.StateRunning, Job: "42", JobStarted: true},
		{State: domain.StateTerminating, Job: "42", Reason: "spot"},
		{State: domain.StateError, Job: "42", Reason: "spot"},
	} {
		if in.Leaving() {
			t.Errorf("%s instance (reason %q) counted as leaving", in.State, in.Reason)
		}
	}
}

// A verb is guarded on the row as read: once the row moved on, it is refused.
func TestVerbsAreGuardedOnTheRowAsRead(t *testing.T) {
	in := domain.Instance{ID: "bp-1", State: domain.StateReady, Version: 3}
	moved := in
	moved.Version = 4
	r := lc.Claim(in, "42", now)
	if _, err := domain.ApplyTransition(moved, r.Guard, now, r.Apply); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("claim of a stale read: %v, want a conflict", err)
	}
	r = lc.ClaimIdle("bp-1", "42", now)
	if _, err := domain.ApplyTransition(moved, r.Guard, now, r.Apply); err != nil {
		t.Fatalf("claim of an idle instance by id: %v", err)
	}
	busy := moved
	busy.Job = "7"
	if _, err := domain.ApplyTransition(busy, r.Guard, now, r.Apply); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("claim of a bound instance by id: %v, want a conflict", err)
	}
}

// A conversion is guarded on the member as the plan read it: a job that
// claimed the member meanwhile keeps it.
func TestConversionsLoseToAClaim(t *testing.T) {
	for _, c := range []struct {
		name string
		in   domain.Instance
		req  func(domain.Instance) domain.TransitionRequest
	}{
		{"to stopped", domain.Instance{ID: "bp-1", Role: domain.RoleHot, State: domain.StateReady, Version: 3},
			func(in domain.Instance) domain.TransitionRequest { return lc.ConvertToStopped(in, now) }},
		{"to hot", domain.Instance{ID: "bp-1", Role: domain.RoleStopped, State: domain.StateStopped, Version: 3},
			func(in domain.Instance) domain.TransitionRequest { return lc.ConvertToHot(in, now) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			claimed := apply(t, c.in, lc.Claim(c.in, "42", now))
			r := c.req(c.in)
			if _, err := domain.ApplyTransition(claimed, r.Guard, now, r.Apply); !errors.Is(err, domain.ErrConflict) {
				t.Fatalf("conversion of a member claimed since: %v, want a conflict", err)
			}
		})
	}
}

func TestJobVerbs(t *testing.T) {
	queued := domain.Job{ID: 42, Status: domain.JobQueued, Pool: "linux", Version: 2, Attempts: 1}
	assigned := domain.Job{ID: 42, Status: domain.JobAssigned, InstanceID: "bp-1", RunnerName: "bp-1-42", RunnerID: 9,
		Via: domain.ViaPool, AssignedAt: now, Version: 2, Attempts: 1}
	interrupted := domain.Job{ID: 42, Status: domain.JobCompleted, Interrupted: true, Version: 5}
	marked := queued
	marked.LaunchedOn = "bp-3"
	launched := assigned
	launched.LaunchedOn = "bp-1"
	rerun := interrupted
	rerun.Rerun = true
	rejected := domain.Job{ID: 42, Status: domain.JobRejected, Reason: "pool linux is not configured", Pool: "linux",
		Version: 2, Attempts: 1, Readmissions: 1}
	readmitted := domain.Job{ID: 42, Status: domain.JobQueued, Version: 3, Attempts: 1, Readmissions: 2}
	cases := []struct {
		name  string
		in    domain.Job
		req   domain.JobTransitionRequest
		check func(domain.Job) bool
	}{
		{"assign", queued, lc.AssignJob(queued, "bp-1", domain.ViaPool, reg, now), func(j domain.Job) bool {
			return j.Status == domain.JobAssigned && j.InstanceID == "bp-1" && j.RunnerID == 9 && j.AssignedAt.Equal(now)
		}},
		{"requeue", assigned, lc.RequeueJob(assigned, "gone"), func(j domain.Job) bool {
			return j.Status == domain.JobQueued && j.InstanceID == "" && j.Attempts == 2 && j.SendPending && j.Reason == "gone"
		}},
		{"unassign", assigned, lc.UnassignJob(assigned, "retry"), func(j domain.Job) bool {
			return j.Status == domain.JobQueued && j.InstanceID == "" && j.Attempts == 1 && !j.SendPending
		}},
		{"bind a queued job", queued, lc.BindJob(queued, "bp-2", now), func(j domain.Job) bool {
			return j.Status == domain.JobAssigned && j.InstanceID == "bp-2"
		}},
		{"overflow", queued, lc.Overflow(queued, ""), func(j domain.Job) bool {
			return j.Route == domain.RouteLaunch && j.Reason == "pool linux had no idle instance"
		}},
		{"start", assigned, lc.StartJob(assigned, now, "bp-2-42"), func(j domain.Job) bool {
			return j.Status == domain.JobRunning && j.RunnerName == "bp-2-42" && j.StartedAt.Equal(now)
		}},
		{"complete", assigned, lc.CompleteJob(assigned, now, "success"), func(j domain.Job) bool {
			return j.Status == domain.JobCompleted && j.Conclusion == "success"
		}},
		{"reject", queued, lc.RejectJob(queued, "no pool"), func(j domain.Job) bool {
			return j.Status == domain.JobRejected && j.Reason == "no pool"
		}},
		{"interrupt", assigned, lc.InterruptJob(assigned), func(j domain.Job) bool {
			return j.Interrupted && !j.Rerun && j.Status == domain.JobAssigned && j.InstanceID == "bp-1"
		}},
		{"launch for", queued, lc.LaunchFor(queued, "bp-3"), func(j domain.Job) bool {
			return j.Status == domain.JobQueued && j.LaunchedOn == "bp-3" && j.InstanceID == "" && j.Version == 3
		}},
		{"retry a marked job", marked, lc.RetryJob(marked, "fleet failed"), func(j domain.Job) bool {
			return j.Status == domain.JobQueued && j.LaunchedOn == "" && j.Attempts == 2 && j.Reason == "fleet failed"
		}},
		{"requeue a launched job", launched, lc.RequeueJob(launched, "gone"), func(j domain.Job) bool {
			return j.Status == domain.JobQueued && j.LaunchedOn == "" && j.InstanceID == ""
		}},
		{"unassign a launched job", launched, lc.UnassignJob(launched, "retry"), func(j domain.Job) bool {
			return j.Status == domain.JobQueued && j.LaunchedOn == "" && j.InstanceID == ""
		}},
		{"re-run", interrupted, lc.RerunJob(interrupted), func(j domain.Job) bool { return j.Interrupted && j.Rerun }},
		{"readmit", rejected, lc.Readmit(rejected), func(j domain.Job) bool {
			return j.Status == domain.JobQueued && j.Reason == "" && j.Unrouted() && j.Pool == "" && j.Runner == "" &&
				j.Spec.Name == "" && !j.SendPending && j.Version == 3 &&
				// A readmission is no failed attempt: what reads Attempts
				// (backoff, the ERROR at three) must not see one.
				j.Attempts == 1 && j.Readmissions == 2
		}},
		{"route", readmitted, lc.RouteJob(readmitted, domain.RoutePool, "linux", "small", domain.RunnerSpec{Name: "small"}),
			func(j domain.Job) bool {
				return j.Status == domain.JobQueued && !j.Unrouted() && j.Route == domain.RoutePool && j.Pool == "linux" &&
					j.Runner == "small" && j.Spec.Name == "small"
			}},
		{"re-run refused", rerun, lc.RerunRefused(rerun), func(j domain.Job) bool { return j.Interrupted && !j.Rerun }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := domain.ApplyJobTransition(tc.in, tc.req.Guard, now, tc.req.Apply)
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			if !tc.check(out) {
				t.Fatalf("after %s: %+v", tc.name, out)
			}
		})
	}
}

// A final job is never rewritten, except for its re-run mark (an
// interrupted job is re-run once GitHub has completed it) and a conclusion
// where it has none (its agent's report came before GitHub's).
func TestACompletedJobTakesOnlyItsRerunMarkAndAFirstConclusion(t *testing.T) {
	done := domain.Job{ID: 42, Status: domain.JobCompleted, Interrupted: true, Labels: []string{"spot"}, Version: 5}
	if _, err := domain.ApplyJobTransition(done, domain.JobGuardOf(done), now, lc.RerunJob(done).Apply); err != nil {
		t.Fatalf("re-run mark on a completed job: %v", err)
	}
	concluded, err := domain.ApplyJobTransition(done, domain.JobGuardOf(done), now, lc.ConcludeJob(done, "failure").Apply)
	if err != nil || concluded.Conclusion != "failure" || concluded.Version != done.Version+1 {
		t.Fatalf("conclusion of a completed job without one: %+v, %v", concluded, err)
	}
	rejected := domain.Job{ID: 43, Status: domain.JobRejected, Version: 2}
	for name, c := range map[string]struct {
		job domain.Job
		fn  func(*domain.Job)
	}{
		"reason":                         {done, func(j *domain.Job) { j.Reason = "x" }},
		"re-run and more":                {done, func(j *domain.Job) { j.Rerun, j.Attempts = true, 2 }},
		"labels":                         {done, func(j *domain.Job) { j.Labels[0] = "other" }},
		"a second conclusion":            {concluded, lc.ConcludeJob(concluded, "success").Apply},
		"a conclusion and more":          {done, func(j *domain.Job) { j.Conclusion, j.Reason = "success", "x" }},
		"a conclusion of a rejected job": {rejected, lc.ConcludeJob(rejected, "success").Apply},
	} {
		var te *domain.JobTransitionError
		if _, err := domain.ApplyJobTransition(c.job, domain.JobGuardOf(c.job), now, c.fn); !errors.As(err, &te) {
			t.Errorf("%s: %v, want an illegal transition", name, err)
		}
	}
}

// Readmit takes a job still rejected, at the version read: one another
// reaper readmitted meanwhile, or a job that was never rejected, is left
// as it is. A completed job is never reopened.
func TestReadmitTakesOnlyAJobStillRejected(t *testing.T) {
	rejected := domain.Job{ID: 42, Status: domain.JobRejected, Reason: "no pool", Version: 2}
	again, err := domain.ApplyJobTransition(rejected, lc.Readmit(rejected).Guard, now, lc.Readmit(rejected).Apply)
	if err != nil {
		t.Fatal(err)
	}
	var conflict *domain.JobConflictError
	if _, err := domain.ApplyJobTransition(again, lc.Readmit(rejected).Guard, now, lc.Readmit(rejected).Apply); !errors.As(err, &conflict) {
		t.Errorf("readmitting a job readmitted meanwhile: %v, want a conflict", err)
	}
	queued := domain.Job{ID: 42, Status: domain.JobQueued, Route: domain.RoutePool, Version: 2}
	if _, err := domain.ApplyJobTransition(queued, lc.Readmit(queued).Guard, now, lc.Readmit(queued).Apply); !errors.As(err, &conflict) {
		t.Errorf("readmitting a queued job: %v, want a conflict", err)
	}
	done := domain.Job{ID: 42, Status: domain.JobCompleted, Version: 2}
	var te *domain.JobTransitionError
	if _, err := domain.ApplyJobTransition(done, domain.JobGuardOf(done), now, func(j *domain.Job) { j.Status = domain.JobQueued }); !errors.As(err, &te) {
		t.Errorf("reopening a completed job: %v, want an illegal transition", err)
	}
	if !domain.CanJobTransition(domain.JobRejected, domain.JobQueued) || domain.CanJobTransition(domain.JobRejected, domain.JobAssigned) {
		t.Error("a rejected job may go back to queued, and only there")
	}
}

// A running job goes back to its queue only as RequeueNotRun sends it:
// unbound, its start and interruption forgotten, its message to be sent.
// A running job bound elsewhere or still started stays refused.
func TestARunningJobGoesBackToItsQueueOnlyAsNotRun(t *testing.T) {
	running := domain.Job{ID: 42, Status: domain.JobRunning, InstanceID: "bp-1", RunnerName: "bp-1-42", RunnerID: 9,
		Via: domain.ViaCold, QueuedAt: now.Add(-time.Minute), AssignedAt: now, StartedAt: now, Interrupted: true,
		Attempts: 1, Version: 3}
	back, err := domain.ApplyJobTransition(running, domain.JobGuardOf(running), now, lc.RequeueNotRun(running, "its runner took job 43").Apply)
	if err != nil {
		t.Fatalf("requeue of a job that never ran: %v", err)
	}
	if back.Status != domain.JobQueued || back.InstanceID != "" || back.RunnerName != "" || !back.StartedAt.IsZero() ||
		back.Interrupted || !back.SendPending || back.Attempts != 2 || back.Reason != "its runner took job 43" {
		t.Fatalf("after RequeueNotRun: %+v", back)
	}
	if since, ok := back.WaitingSince(); !ok || !since.Equal(running.QueuedAt) {
		t.Fatalf("waiting %v since %s, want waiting since GitHub queued it", ok, since)
	}
	for name, fn := range map[string]func(*domain.Job){
		"requeued as if assigned": lc.RequeueJob(running, "x").Apply,
		"still bound":             func(j *domain.Job) { lc.RequeueNotRun(running, "x").Apply(j); j.InstanceID = "bp-1" },
		"message not to be sent":  func(j *domain.Job) { lc.RequeueNotRun(running, "x").Apply(j); j.SendPending = false },
		"status alone":            func(j *domain.Job) { j.Status = domain.JobQueued },
	} {
		var te *domain.JobTransitionError
		if _, err := domain.ApplyJobTransition(running, domain.JobGuardOf(running), now, fn); !errors.As(err, &te) {
			t.Errorf("%s: %v, want an illegal transition", name, err)
		}
	}
}

// Assign is one change: the job is assigned and the instance gets its
// runner together.
func TestAssignIsOneChange(t *testing.T) {
	in := domain.Instance{ID: "bp-1", State: domain.StateClaimed, Job: "42", Version: 2}
	j := domain.Job{ID: 42, Status: domain.JobQueued, Version: 1}
	c := lc.Assign(in, j, domain.ViaCold, reg, now)
	if len(c.Instances) != 1 || len(c.Jobs) != 1 || c.Instances[0].ID != "bp-1" || c.Jobs[0].ID != 42 {
		t.Fatalf("change %+v", c)
	}
}

func TestParseRunnerNameReadsBackRunnerName(t *testing.T) {
	for _, id := range []string{"bp-3f9a0c1d2e4b5a69", domain.NewID("bp"), "bp-a", "bp-with-dashes-7"} {
		for _, job := range []int64{1, 42, 9_000_000_000_123} {
			name := domain.RunnerName(id, job)
			got, _, ok := domain.ParseRunnerName(name)
			if !ok || got != id {
				t.Errorf("ParseRunnerName(%q) = %q, %v; want %q", name, got, ok, id)
			}
		}
	}
}

// GitHub reports whichever runner took a job: a hosted runner, another
// tool's self-hosted runner, a name mangled in transit. None of them names
// an instance of ours.
func TestParseRunnerNameRefusesOtherNames(t *testing.T) {
	for _, name := range []string{
		"",
		"GitHub Actions 2",
		"ubuntu-latest-12",
		"my-runner-7",
		"BP-3f9a-42",                   // bullpen's prefix is lower case
		"xbp-3f9a-42",                  // prefix not at the start
		"bp-3f9a",                      // no job id
		"bp-3f9a-",                     // empty job id
		"bp-3f9a-x42",                  // job id not a number
		"bp-3f9a-4.2",                  // nor a decimal
		"bp-3f9a-99999999999999999999", // beyond int64
		"-42",
		"bp",
	} {
		if got, _, ok := domain.ParseRunnerName(name); ok {
			t.Errorf("ParseRunnerName(%q) = %q, want refused", name, got)
		}
	}
}

func TestMachineGoneIsOneRule(t *testing.T) {
	grace := 2 * time.Minute
	young := domain.Instance{ID: "bp-1", CloudID: "i-1", State: domain.StateBooting, CreatedAt: now.Add(-time.Minute)}
	old := young
	old.CreatedAt = now.Add(-grace)
	cases := []struct {
		name   string
		in     domain.Instance
		m      domain.CloudState
		listed bool
		want   bool
	}{
		{"listed running", old, domain.CloudRunning, true, false},
		{"listed terminated, however young", young, domain.CloudTerminated, true, true},
		{"listed shutting down", young, domain.CloudShuttingDown, true, true},
		{"unlisted within the grace", young, "", false, false},
		{"unlisted past the grace", old, "", false, true},
		{"no cloud id yet", domain.Instance{ID: "bp-2", State: domain.StatePending, CreatedAt: now.Add(-time.Hour)}, "", false, false},
		{"already closed", domain.Instance{ID: "bp-3", CloudID: "i-3", State: domain.StateTerminated}, "", false, false},
	}
	for _, tc := range cases {
		m := domain.CloudInstance{ID: tc.in.CloudID, State: tc.m}
		if got := domain.MachineGone(tc.in, m, tc.listed, now, grace); got != tc.want {
			t.Errorf("%s: gone = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// A new machine's agent may say hello while its runner is registered: the
// runner is given all the same, but not to an instance that moved on.
func TestGiveRunnerSurvivesAHelloButNotAnotherJob(t *testing.T) {
	in := domain.Instance{ID: "bp-1", State: domain.StateBooting, Job: "42", Version: 2}
	r := lc.GiveRunner(in, reg)
	hello := in
	hello.Version, hello.AgentTokenHash = 3, "h"
	got, err := domain.ApplyTransition(hello, r.Guard, now, r.Apply)
	if err != nil || got.RunnerName != reg.Name {
		t.Fatalf("after a hello: %+v, %v", got, err)
	}
	for _, moved := range []domain.Instance{
		{ID: "bp-1", State: domain.StateBooting, Job: "43", Version: 3},
		{ID: "bp-1", State: domain.StateTerminating, Job: "42", Version: 3},
	} {
		if _, err := domain.ApplyTransition(moved, r.Guard, now, r.Apply); !errors.Is(err, domain.ErrConflict) {
			t.Errorf("runner given to %+v: %v", moved, err)
		}
	}
}

// A job still waiting is assigned whatever else was recorded on it
// meanwhile; one assigned elsewhere meanwhile is not taken again.
func TestAssignJobTakesAWaitingJobOnly(t *testing.T) {
	j := domain.Job{ID: 42, Status: domain.JobQueued, Version: 1}
	r := lc.AssignJob(j, "bp-1", domain.ViaCold, reg, now)
	redelivered := j
	redelivered.Version = 2
	got, err := domain.ApplyJobTransition(redelivered, r.Guard, now, r.Apply)
	if err != nil || got.InstanceID != "bp-1" || got.Status != domain.JobAssigned {
		t.Fatalf("a waiting job touched meanwhile: %+v, %v", got, err)
	}
	taken := redelivered
	taken.Status, taken.InstanceID = domain.JobAssigned, "bp-2"
	if _, err := domain.ApplyJobTransition(taken, r.Guard, now, r.Apply); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("a job assigned elsewhere meanwhile: %v, want a conflict", err)
	}
}

func TestTerminateDoneWhenEveryMachineIsGone(t *testing.T) {
	for _, tc := range []struct {
		err  error
		done bool
	}{
		{nil, true},
		{&domain.UnknownInstancesError{Op: "TerminateInstances", IDs: []string{"i-1"}}, true},
		{&domain.CloudError{Op: "TerminateInstances", Code: "UnauthorizedOperation", Err: domain.ErrUnauthorized}, false},
	} {
		if got := domain.TerminateDone(tc.err); got != tc.done {
			t.Errorf("TerminateDone(%v) = %t, want %t", tc.err, got, tc.done)
		}
	}
}

func TestDoublingWaitsGrowToTheirCap(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 6: 30 * time.Second, 100: 30 * time.Second} {
		if got := domain.Doubling(time.Second, 30*time.Second, n); got != want {
			t.Errorf("Doubling(1s, 30s, %d) = %v, want %v", n, got, want)
		}
	}
}
