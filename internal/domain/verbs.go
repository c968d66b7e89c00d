package domain

import "time"

// Lifecycle names every change that can happen to an instance or a job.
// Each verb returns the guarded request a store applies: the guard is the
// row as it was read (state, job and version), and the verb sets the state
// it leads to, the deadline of that state and the reason. Loops commit
// verbs; they never edit a row by hand. Where an instance and a job change
// together, the verbs make one Change that a store applies atomically.
type Lifecycle struct {
	Deadlines Deadlines
}

// NewLifecycle returns the verbs under d, or the default deadlines when d
// is zero.
func NewLifecycle(d Deadlines) Lifecycle {
	if d == (Deadlines{}) {
		d = DefaultDeadlines()
	}
	return Lifecycle{Deadlines: d}
}

func change(in Instance, fn func(*Instance)) TransitionRequest {
	return TransitionRequest{ID: in.ID, Guard: GuardOf(in), Apply: fn}
}

func jobChange(j Job, fn func(*Job)) JobTransitionRequest {
	return JobTransitionRequest{ID: j.ID, Guard: JobGuardOf(j), Apply: fn}
}

// enter moves i to state s with that state's deadline from now.
func (l Lifecycle) enter(i *Instance, s State, now time.Time) {
	i.State, i.Deadline = s, l.Deadlines.Until(s, now)
}

// Launched records that the create call returned machine m for the pending
// row (written at version 1): the row is booting. bootstrapHash, when set,
// is the hash of the machine's own bootstrap secret (MachineSecret).
func (l Lifecycle) Launched(row Instance, m CloudInstance, bootstrapHash string, now time.Time) TransitionRequest {
	if row.Version == 0 {
		row.Version = 1 // a row as CreateInstances stamps it
	}
	return change(row, func(i *Instance) {
		l.enter(i, StateBooting, now)
		i.CloudID, i.RunningSince = m.ID, now
		i.InstanceType, i.UsageClass = m.InstanceType, m.UsageClass
		if bootstrapHash != "" {
			i.BootstrapHash = bootstrapHash
		}
	})
}

// Warm: boot and warm-up finished; the instance is ready, until deadline
// (a hot pool member's idle lifetime, or the ready allowance).
func (l Lifecycle) Warm(in Instance, deadline time.Time) TransitionRequest {
	return change(in, func(i *Instance) { i.State, i.Deadline = StateReady, deadline })
}

// Stop parks a warmed stopped-pool member; Stopped records that its machine
// stopped.
func (l Lifecycle) Stop(in Instance, now time.Time) TransitionRequest {
	return change(in, func(i *Instance) { l.enter(i, StateStopping, now) })
}

// Stopped records that a member's machine is parked.
func (l Lifecycle) Stopped(in Instance, now time.Time) TransitionRequest {
	return change(in, func(i *Instance) {
		l.enter(i, StateStopped, now)
		i.RunningSince = time.Time{}
	})
}

// ConvertToStopped makes a ready hot member a stopped-pool member and parks
// it: the pool has a hot member too many and a stopped one too few, and
// stopping a machine that is up and warm costs less than terminating it and
// launching another to warm and stop. The caller stops the machine after
// this change, never before: a job that claimed the member meanwhile keeps
// it. A spot machine cannot be stopped: the plan never converts one.
func (l Lifecycle) ConvertToStopped(in Instance, now time.Time) TransitionRequest {
	return change(in, func(i *Instance) {
		l.enter(i, StateStopping, now)
		i.Role = RoleStopped
	})
}

// ConvertToHot makes a parked member a hot member whose machine is to be
// started: it boots again, and becomes ready as every new member does, when
// its agent reports that warm-up finished (on a started machine the agent
// keeps its token and warms up again, from a disk already warm). Its
// launch clock restarts, as the cloud's does, so that the dangling rule
// times this boot. The caller starts the machine after this change, never
// before: a job that claimed the member meanwhile keeps it, and the agent's
// warm signal always finds the row booting.
func (l Lifecycle) ConvertToHot(in Instance, now time.Time) TransitionRequest {
	return change(in, func(i *Instance) {
		l.enter(i, StateBooting, now)
		i.Role, i.RunningSince = RoleHot, now
	})
}

// StartFailed takes ConvertToHot back when the cloud did not start the
// machine (no capacity for it, say): the member, in as ConvertToHot left
// it, is parked again with the role and the parked allowance it had when
// it was read as parked.
func (l Lifecycle) StartFailed(in, parked Instance) TransitionRequest {
	return change(in, func(i *Instance) {
		i.State, i.Role, i.Deadline = StateStopped, parked.Role, parked.Deadline
		i.RunningSince = time.Time{}
	})
}

// Claim reserves an idle instance (ready or stopped) for job, guarded on
// the row as read.
func (l Lifecycle) Claim(in Instance, job string, now time.Time) TransitionRequest {
	return change(in, func(i *Instance) {
		l.enter(i, StateClaimed, now)
		i.Job, i.Reason = job, ""
	})
}

// ClaimIdle is the atomic idle → claimed transition of an instance known
// only by id (a resource-pool entry): guarded on ready and no job, so of
// many claimers exactly one wins.
func (l Lifecycle) ClaimIdle(id, job string, now time.Time) TransitionRequest {
	r := l.Claim(Instance{ID: id}, job, now)
	r.Guard = Guard{State: StateReady}
	return r
}

// Unclaim gives a claimed instance that will not serve its job back to
// idle: state back (ready, or stopped if it never started) until deadline.
func (l Lifecycle) Unclaim(in Instance, back State, deadline time.Time) TransitionRequest {
	return change(in, func(i *Instance) {
		i.State, i.Job, i.Deadline = back, "", deadline
		i.RunnerName, i.RunnerConfig = "", ""
	})
}

// GiveRunner records on an instance the just-in-time runner registered for
// its job: its agent starts that runner. It is guarded by state and job,
// not version: a new machine's agent may say hello (its token recorded)
// while the runner is being registered, and that changes nothing the
// handover relies on.
func (l Lifecycle) GiveRunner(in Instance, reg RunnerRegistration) TransitionRequest {
	return TransitionRequest{ID: in.ID, Guard: Guard{State: in.State, Job: in.Job},
		Apply: func(i *Instance) { i.RunnerName, i.RunnerConfig = reg.Name, reg.JITConfig }}
}

// IssueToken records the hash of the token an instance's agent was given.
func (l Lifecycle) IssueToken(in Instance, tokenHash string) TransitionRequest {
	return change(in, func(i *Instance) { i.AgentTokenHash = tokenHash })
}

// Register: the instance's runner registered for its job; it runs it.
func (l Lifecycle) Register(in Instance, now time.Time) TransitionRequest {
	return change(in, func(i *Instance) { l.enter(i, StateRunning, now) })
}

// JobStarted marks that the instance's job began: no loop may touch it.
func (l Lifecycle) JobStarted(in Instance) TransitionRequest {
	return change(in, func(i *Instance) { i.JobStarted = true })
}

// Bind binds an instance to job in place of the one it had, after GitHub
// said which job its runner took.
func (l Lifecycle) Bind(in Instance, job string) TransitionRequest {
	return change(in, func(i *Instance) { i.Job = job })
}

// Unbind takes an instance's job away: another runner runs it. An instance
// whose runner started a job keeps that mark and its deadline; one whose
// runner waits may wait until wait at most.
func (l Lifecycle) Unbind(in Instance, wait time.Time) TransitionRequest {
	return change(in, func(i *Instance) {
		i.Job = ""
		if !i.JobStarted && (i.Deadline.IsZero() || wait.Before(i.Deadline)) {
			i.Deadline = wait
		}
	})
}

// UnbindForeign takes an instance's job away because its runner took a
// job bullpen does not know (another stack's, whose labels it carries):
// that job runs on it, so it is kept until until at least, where Unbind
// only shortens a wait.
func (l Lifecycle) UnbindForeign(in Instance, until time.Time) TransitionRequest {
	return change(in, func(i *Instance) {
		i.Job = ""
		if until.After(i.Deadline) {
			i.Deadline = until
		}
	})
}

// Release ends an instance's job: with reuse it is releasing (the trigger
// of the release handshake: its agent deregisters), else, when retire
// says why, it is terminated for that reason. Its runner is spent either
// way: a just-in-time runner serves one job.
func (l Lifecycle) Release(in Instance, retire string, now time.Time) TransitionRequest {
	return change(in, func(i *Instance) {
		i.Job, i.JobStarted, i.JobsServed = "", false, i.JobsServed+1
		i.RunnerName, i.RunnerConfig = "", ""
		if retire == "" {
			l.enter(i, StateReleasing, now)
			return
		}
		l.enter(i, StateTerminating, now)
		i.Reason = retire
	})
}

// Pool puts a released instance back to idle, in the resource pool of its
// class, until deadline (its idle time, capped by its max-age).
//
// A pool member leaves its pool for good when it takes a job: the converger
// replaced it then. Back as a member it would put the pool one over its
// target, and the converger would terminate a machine as excess; a parked
// one would also be stopped again, its deadline reset to the stopped
// allowance and its max-age lost. So it comes back as an instance of no
// role in the pool, like one launched for a job: the reaper ends it at its
// deadline, and it keeps its pool, whose jobs it may still serve.
func (l Lifecycle) Pool(in Instance, deadline time.Time) TransitionRequest {
	return change(in, func(i *Instance) {
		i.State, i.Deadline = StateReady, deadline
		i.Role = RoleOnDemand
	})
}

// Retire takes an instance out of service, to state to (error, or
// terminating) for reason, until deadline. An instance whose job had not
// started is unbound from it: its job must go back to its queue in the same
// change (see RequeueJob).
func (l Lifecycle) Retire(in Instance, to State, reason string, deadline time.Time) TransitionRequest {
	return change(in, func(i *Instance) {
		i.State, i.Reason, i.Deadline = to, reason, deadline
		if !i.JobStarted {
			i.Job = ""
		}
	})
}

// Interrupt takes an instance whose machine the cloud is taking back out of
// service: terminating, for reason, until deadline. A job that started (as
// its agent or GitHub reported) stays bound to it and is marked started, so
// that its completion finds it; one that had not is unbound, and must go
// back to its queue in the same change. An instance still running its
// started job is left to finish it instead (Leave).
func (l Lifecycle) Interrupt(in Instance, jobStarted bool, reason string, deadline time.Time) TransitionRequest {
	return change(in, func(i *Instance) {
		i.State, i.Reason, i.Deadline = StateTerminating, reason, deadline
		switch {
		case jobStarted:
			i.JobStarted = true
		case !i.JobStarted:
			i.Job = ""
		}
	})
}

// Leave takes an instance whose machine the cloud is taking back at until
// out of service while it runs a job that started (as its agent or GitHub
// reported): the job is not cut short before the cloud cuts it, and a short
// job, or the last steps of a long one, may finish. The instance is
// running, bound to its job and marked started, for reason, until then
// (Leaving): it is no pool's member and nothing claims or releases it; the
// end of its job retires it, and past until the reaper terminates it if
// the cloud has not. An instance booting or claimed whose runner GitHub
// saw start its job is running that job: it is running now.
func (l Lifecycle) Leave(in Instance, reason string, until time.Time) TransitionRequest {
	if reason == "" {
		reason = "the cloud is taking the machine back"
	}
	return change(in, func(i *Instance) {
		i.State, i.Reason, i.Deadline = StateRunning, reason, until
		i.JobStarted = true
	})
}

// Leaving reports whether i is out of service while its machine runs on
// (Leave): a running instance is given a reason only there.
func (i Instance) Leaving() bool {
	return i.State == StateRunning && i.Reason != ""
}

// Fail takes an instance out of service in error, for reason.
func (l Lifecycle) Fail(in Instance, reason string, now time.Time) TransitionRequest {
	return l.Retire(in, StateError, reason, l.Deadlines.Until(StateError, now))
}

// Terminate marks an instance terminating, for reason: the terminator
// makes the cloud call. An instance already terminating keeps its deadline
// and takes the new reason.
func (l Lifecycle) Terminate(in Instance, reason string, now time.Time) TransitionRequest {
	if in.State == StateTerminating {
		return change(in, func(i *Instance) { i.Reason = reason })
	}
	return l.Retire(in, StateTerminating, reason, l.Deadlines.Until(StateTerminating, now))
}

// Close records that an instance's machine is gone: the row is terminated.
func (l Lifecycle) Close(in Instance) TransitionRequest {
	return change(in, func(i *Instance) { i.State, i.Deadline = StateTerminated, time.Time{} })
}

// AssignJob binds a queued job to the instance that will serve it, with
// the runner registered for it.
//
// It is guarded by the job's status alone: a job still waiting for a runner
// may be assigned whatever else was recorded on it meanwhile (a duplicate
// delivery, an overflow to the launch queue), and a job that was assigned,
// started or cancelled meanwhile has left that status.
func (l Lifecycle) AssignJob(j Job, instanceID string, via Via, reg RunnerRegistration, now time.Time) JobTransitionRequest {
	return JobTransitionRequest{ID: j.ID, Guard: JobGuard{Status: j.Status}, Apply: func(x *Job) {
		x.Status, x.Via, x.InstanceID, x.AssignedAt = JobAssigned, via, instanceID, now
		x.RunnerName, x.RunnerID, x.Reason = reg.Name, reg.RunnerID, ""
		x.SendPending = false
	}}
}

// InterruptJob records that a started job's machine was taken back by the
// cloud: the job is GitHub's to fail, and may be re-run.
func (l Lifecycle) InterruptJob(j Job) JobTransitionRequest {
	return jobChange(j, func(x *Job) { x.Interrupted = true })
}

// RerunJob records that GitHub is about to be asked to re-run an
// interrupted job. It is written before the request, guarded on the job as
// read, so that of several reapers one asks, and a job is re-run at most
// once.
func (l Lifecycle) RerunJob(j Job) JobTransitionRequest {
	return jobChange(j, func(x *Job) { x.Rerun = true })
}

// RerunRefused takes RerunJob back when GitHub would not re-run the job
// (its run is still in progress): it is asked again later.
func (l Lifecycle) RerunRefused(j Job) JobTransitionRequest {
	return jobChange(j, func(x *Job) { x.Rerun = false })
}

// Assign is the one atomic change that hands a claimed (or new) instance to
// its job: the job is assigned with the runner registered for it, and the
// instance gets that runner.
func (l Lifecycle) Assign(in Instance, j Job, via Via, reg RunnerRegistration, now time.Time) Change {
	return Change{
		Instances: []TransitionRequest{l.GiveRunner(in, reg)},
		Jobs:      []JobTransitionRequest{l.AssignJob(j, in.ID, via, reg, now)},
	}
}

// BindJob records which instance runs a job, as GitHub reported it; a job
// still queued is assigned.
func (l Lifecycle) BindJob(j Job, instanceID string, now time.Time) JobTransitionRequest {
	return jobChange(j, func(x *Job) {
		x.InstanceID = instanceID
		if x.Status == JobQueued {
			x.Status, x.AssignedAt, x.SendPending = JobAssigned, now, false
		}
	})
}

// UnassignJob returns an assigned job to queued whose queue message is
// still in flight (it comes back by itself): no new message is needed.
func (l Lifecycle) UnassignJob(j Job, reason string) JobTransitionRequest {
	return jobChange(j, func(x *Job) {
		x.Status, x.Reason = JobQueued, reason
		x.InstanceID, x.RunnerName, x.RunnerID, x.Via = "", "", 0, ""
		x.AssignedAt, x.LaunchedOn = time.Time{}, ""
	})
}

// RequeueJob sends an assigned job back to its queue, unbound, as a new
// attempt whose queue message is still to be sent (SendPending) when the
// change is committed.
func (l Lifecycle) RequeueJob(j Job, reason string) JobTransitionRequest {
	return jobChange(j, func(x *Job) {
		x.Status, x.Reason, x.SendPending = JobQueued, reason, true
		x.InstanceID, x.RunnerName, x.RunnerID, x.LaunchedOn = "", "", 0, ""
		x.AssignedAt, x.Via = time.Time{}, ""
		x.Attempts++
	})
}

// Approve records that a job waiting for approval (an environment's
// reviewers) was queued: it waits for a runner now.
func (l Lifecycle) Approve(j Job) JobTransitionRequest {
	return jobChange(j, func(x *Job) { x.Reason = "" })
}

// LaunchFor records, on a queued job, the instance about to be launched
// for it (LaunchedOn), before the create call. The job stays queued and
// bound to no instance until the handover, but a provisioner holding a
// second message for it leaves it to this launch while the instance's row
// may still serve it. Guarded on the job as read, so that of two
// provisioners marking one job, one launches.
func (l Lifecycle) LaunchFor(j Job, instanceID string) JobTransitionRequest {
	return jobChange(j, func(x *Job) { x.LaunchedOn = instanceID })
}

// RetryJob records another attempt at serving a queued job, and why the
// last one failed. The launch the job was marked with (LaunchFor), if any,
// is over.
func (l Lifecycle) RetryJob(j Job, reason string) JobTransitionRequest {
	return jobChange(j, func(x *Job) {
		x.Attempts++
		x.LaunchedOn = ""
		if reason != "" {
			x.Reason = reason
		}
	})
}

// MessageSent clears a job's SendPending once its queue message is out.
func (l Lifecycle) MessageSent(j Job) JobTransitionRequest {
	return jobChange(j, func(x *Job) { x.SendPending = false })
}

// Overflow sends a pool job no warm instance could take to the launch
// queue; why says why ("" : the pool had no idle instance).
func (l Lifecycle) Overflow(j Job, why string) JobTransitionRequest {
	if why == "" {
		why = "pool " + j.Pool + " had no idle instance"
	}
	return jobChange(j, func(x *Job) { x.Route, x.Reason = RouteLaunch, why })
}

// StartJob records that GitHub (or the agent) reports the job started, on
// the runner named when known.
func (l Lifecycle) StartJob(j Job, at time.Time, runnerName string) JobTransitionRequest {
	return jobChange(j, func(x *Job) {
		x.Status, x.StartedAt = JobRunning, at
		if runnerName != "" {
			x.RunnerName = runnerName
		}
	})
}

// RequeueNotRun is RequeueJob for a job its agent reported started on a
// runner that GitHub says took another job: the job never ran there, and
// GitHub holds it queued still. Its start is forgotten, and so is an
// interruption of the machine it was thought to run on.
func (l Lifecycle) RequeueNotRun(j Job, reason string) JobTransitionRequest {
	r := l.RequeueJob(j, reason)
	requeue := r.Apply
	r.Apply = func(x *Job) {
		requeue(x)
		x.StartedAt, x.Interrupted = time.Time{}, false
	}
	return r
}

// CompleteJob records a job's end.
func (l Lifecycle) CompleteJob(j Job, at time.Time, conclusion string) JobTransitionRequest {
	return jobChange(j, func(x *Job) { x.Status, x.CompletedAt, x.Conclusion = JobCompleted, at, conclusion })
}

// ConcludeJob gives a job completed without a conclusion (its agent's
// report came first) the conclusion GitHub reports.
func (l Lifecycle) ConcludeJob(j Job, conclusion string) JobTransitionRequest {
	return jobChange(j, func(x *Job) { x.Conclusion = conclusion })
}

// Readmit sends a rejected job back to be routed: the configuration in
// force now serves its labels (a pool added after its webhook came), and
// GitHub still holds it queued. It is queued again with no route and its
// rejection's reason dropped, so that the intake routes it as a new
// arrival (RouteJob). Guarded on the job as read and still rejected, so
// that of two reapers one readmits it. It counts a readmission, not an
// attempt: Attempts counts failures to serve the job, and the message the
// intake sends for it is told apart from one sent before it was rejected
// by both counts (jobs.SendRequest).
func (l Lifecycle) Readmit(j Job) JobTransitionRequest {
	return JobTransitionRequest{ID: j.ID, Guard: JobGuard{Status: JobRejected, Version: j.Version}, Apply: func(x *Job) {
		x.Status, x.Reason = JobQueued, ""
		x.Route, x.Pool, x.Runner, x.Spec = "", "", "", RunnerSpec{}
		x.InstanceID, x.LaunchedOn, x.RunnerName, x.RunnerID, x.Via = "", "", "", 0, ""
		x.SendPending = false
		x.Readmissions++
	}}
}

// Unrouted reports whether j waits for the intake to route it: queued with
// no route, as Readmit leaves it.
func (j Job) Unrouted() bool { return j.Status == JobQueued && j.Route == "" }

// RouteJob gives a readmitted job the route, pool, runner and machine its
// labels take under the configuration in force, as the intake gives a new
// arrival. Guarded on the job as read, still unrouted.
func (l Lifecycle) RouteJob(j Job, route Route, pool, runner string, spec RunnerSpec) JobTransitionRequest {
	return jobChange(j, func(x *Job) { x.Route, x.Pool, x.Runner, x.Spec = route, pool, runner, spec })
}

// RejectJob records that bullpen will not serve a job, and why.
func (l Lifecycle) RejectJob(j Job, reason string) JobTransitionRequest {
	return jobChange(j, func(x *Job) {
		x.Status, x.Reason = JobRejected, reason
		x.InstanceID, x.RunnerName, x.RunnerID, x.Via = "", "", 0, ""
		x.SendPending = false
	})
}
