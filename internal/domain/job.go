package domain

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"
)

// JobStatus is where a GitHub workflow job is, as bullpen sees it.
type JobStatus string

const (
	JobQueued    JobStatus = "queued"    // waiting for a runner
	JobAssigned  JobStatus = "assigned"  // an instance is bound to it and has its runner registration
	JobRunning   JobStatus = "running"   // GitHub reports it in progress
	JobCompleted JobStatus = "completed" // finished, or cancelled
	// JobRejected: bullpen does not serve it (Reason says why). It goes
	// back to queued, readmitted, once the configuration in force takes it
	// while GitHub still holds it queued.
	JobRejected JobStatus = "rejected"
)

// JobStatuses lists every status in lifecycle order.
var JobStatuses = []JobStatus{JobQueued, JobAssigned, JobRunning, JobCompleted, JobRejected}

var jobTransitions = stateMachine[JobStatus]{
	// A queued job can finish without a runner (cancelled) or be refused.
	JobQueued: {JobAssigned, JobRunning, JobCompleted, JobRejected},
	// An assigned job whose instance failed goes back to the queue.
	JobAssigned:  {JobQueued, JobRunning, JobCompleted},
	JobRunning:   {JobCompleted},
	JobCompleted: {},
	// A job rejected under one configuration is readmitted under a later
	// one that serves it (Lifecycle.Readmit).
	JobRejected: {JobQueued},
}

// Valid reports whether s is a known status.
func (s JobStatus) Valid() bool { return jobTransitions.known(s) }

// Final reports whether s ends the job as bullpen serves it: no runner
// will come, and the row is never rewritten in place. Nothing follows
// completed; a rejected job may only be readmitted (Lifecycle.Readmit).
func (s JobStatus) Final() bool { return s == JobCompleted || s == JobRejected }

// CanJobTransition reports whether from → to is allowed. A status may be
// rewritten in place (other fields) unless it is final.
func CanJobTransition(from, to JobStatus) bool {
	return jobTransitions.allows(from, to, JobStatus.Final)
}

// Route is the queue a job was sent to.
type Route string

const (
	RoutePool   Route = "pool"   // the pool queue: served by a pool's warm instances
	RouteLaunch Route = "launch" // the launch queue: reuse from the resource pool, else create
)

// Via says how a job got its instance, for latency figures. It is decided
// when the instance is claimed and kept: the instance's role and state
// change afterwards (a member serving a job is detached, released for reuse,
// stopped), so they cannot tell it later.
type Via string

const (
	ViaHot     Via = "hot"     // a running pool member
	ViaStopped Via = "stopped" // a stopped pool member, started for the job
	ViaReuse   Via = "reuse"   // an idle instance back from a job: the resource pool's, or a pool's reusable one
	ViaCold    Via = "cold"    // a new instance
	// ViaPool is a pool member, hot or stopped not recorded: only jobs
	// recorded before the two were told apart hold it.
	ViaPool Via = "pool"
)

// PoolMember reports whether v is a pool member serving the job: hot,
// stopped, or an older row's pool.
func (v Via) PoolMember() bool { return v == ViaHot || v == ViaStopped || v == ViaPool }

// ViaClaim is how a pool job is served by the pool instance in, as it was
// when claimed: a running instance back from a job (no longer a member) is
// reuse, a running member hot, and a stopped one is started for the job.
func ViaClaim(in Instance) Via {
	switch {
	case in.State == StateStopped:
		return ViaStopped
	case in.Role == RoleOnDemand:
		return ViaReuse
	}
	return ViaHot
}

// Job is a GitHub workflow job bullpen has accepted (or rejected).
type Job struct {
	ID         int64 // GitHub's workflow job id
	RunID      int64
	RunAttempt int
	Repo       string // owner/name
	Name       string
	Workflow   string
	Labels     []string

	Status JobStatus
	Route  Route
	Via    Via
	Pool   string     // the pool= label, when it names a pool
	Runner string     // runner class: the pool's runner, the runner= label, or an ad-hoc spec's key
	Spec   RunnerSpec // the machine the job needs

	InstanceID string // bullpen instance bound to it
	// LaunchedOn is the instance a provisioner launches for the queued job
	// (Lifecycle.LaunchFor), recorded before its create call so that a
	// second message for the job is put off while that launch may still
	// serve it. It binds nothing: the job is that instance's only once the
	// handover assigns it (InstanceID). Going back to wait for a runner
	// clears it.
	LaunchedOn string
	// RunnerName is the runner registered for the job, until GitHub reports
	// the runner that took it (possibly another one: see jobs.FollowRunner).
	RunnerName string
	RunnerID   int64
	Reason     string
	Conclusion string
	Attempts   int // times it was sent to be served
	// Readmissions counts the times the job went back from rejected to
	// queued (Lifecycle.Readmit). It is kept apart from Attempts, which
	// counts failed tries to serve it, and kept on the row so that the
	// bound on readmissions survives a restart.
	Readmissions int
	// SendPending: the job went back to queued in a change that also
	// touched its instance, and its queue message may not be sent yet. The
	// sender clears it once the message is out; the reaper sends it again
	// for a job left with it set (a crash between the two writes). The
	// intake sets it too for a recorded job whose queued delivery it
	// dead-letters, so that the reaper sends it.
	SendPending bool
	// Interrupted: the job's machine was taken back by the cloud (a spot
	// interruption) after the job started; GitHub fails the job, and it is
	// re-run once its run completes when its runner allows (Rerun once
	// asked).
	Interrupted bool
	Rerun       bool
	Version     int64

	CreatedAt   time.Time
	UpdatedAt   time.Time
	QueuedAt    time.Time // when GitHub queued it
	AssignedAt  time.Time
	StartedAt   time.Time
	CompletedAt time.Time
}

// HandoverAllowance is how long a machine launched for a job may boot
// without its runner. The provisioner hands a new machine its job and
// runner as soon as its fleet returns, so one still without them after
// this long was left by a provisioner that stopped in between (a crash, a
// replica killed), and nobody will hand it over.
const HandoverAllowance = time.Minute

// AgentBackoffMax is the longest an agent waits between two tries to reach
// the control plane. After an outage of the control plane every agent is
// somewhere in its backoff, so one may stay unheard this long after the
// control plane is back, alive and well.
const AgentBackoffMax = 30 * time.Second

// AbandonedLaunch reports whether in is a machine launched for a job and
// left booting without its runner for HandoverAllowance at now.
func AbandonedLaunch(in Instance, now time.Time) bool {
	return in.State == StateBooting && in.Role == RoleOnDemand && in.Job != "" && in.RunnerName == "" &&
		!now.Before(in.StateSince.Add(HandoverAllowance))
}

// ReasonWaitingForApproval is the Reason of a queued job GitHub holds for
// an approval (a deployment protection rule): it waits for a person, not
// for a runner.
const ReasonWaitingForApproval = "waiting for approval"

// HeldForApproval reports whether GitHub holds j, queued, for an approval.
func (j Job) HeldForApproval() bool {
	return j.Status == JobQueued && j.Reason == ReasonWaitingForApproval
}

// WaitingSince says whether j waits for a runner, and since when: queued
// and not held for an approval, or assigned to an instance whose runner has
// not taken it yet (one that never comes up must not drop the job out of
// the wait). The wait runs from GitHub queuing the job, which a requeue
// leaves as it is, so a job going back and forth between queued and
// assigned keeps its age.
func (j Job) WaitingSince() (time.Time, bool) {
	switch {
	case j.HeldForApproval():
		return time.Time{}, false
	case j.Status != JobQueued && j.Status != JobAssigned:
		return time.Time{}, false
	case !j.StartedAt.IsZero() || j.QueuedAt.IsZero():
		return time.Time{}, false
	}
	return j.QueuedAt, true
}

// Key is the job's id as instances carry it (Instance.Job).
func (j Job) Key() string { return JobKey(j.ID) }

// JobKey formats a job id as instances carry it.
func JobKey(id int64) string { return strconv.FormatInt(id, 10) }

// ParseJobKey is JobKey's inverse.
func ParseJobKey(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("bad job key %q", s)
	}
	return id, nil
}

// JobGuard is the condition of a job change: the job must have Status and,
// when Version is non-zero, be at Version.
type JobGuard struct {
	Status  JobStatus
	Version int64
}

// JobGuardOf returns the guard that matches j exactly as read.
func JobGuardOf(j Job) JobGuard { return JobGuard{Status: j.Status, Version: j.Version} }

// Matches reports whether j satisfies g.
func (g JobGuard) Matches(j Job) bool {
	return j.Status == g.Status && (g.Version == 0 || j.Version == g.Version)
}

// JobConflictError says a job guard did not match; it wraps ErrConflict.
type JobConflictError struct {
	ID     int64
	Want   JobGuard
	Actual JobGuard
}

func (e *JobConflictError) Error() string {
	return fmt.Sprintf("job %d: expected status=%s version=%d, found status=%s version=%d",
		e.ID, e.Want.Status, e.Want.Version, e.Actual.Status, e.Actual.Version)
}

func (e *JobConflictError) Unwrap() error { return ErrConflict }

// JobTransitionError reports a status change the job lifecycle forbids.
type JobTransitionError struct {
	ID       int64
	From, To JobStatus
}

func (e *JobTransitionError) Error() string {
	return fmt.Sprintf("job %d: illegal transition %s -> %s", e.ID, e.From, e.To)
}

// ApplyJobTransition is ApplyTransition for jobs: stores call it inside their
// atomic section.
func ApplyJobTransition(cur Job, g JobGuard, now time.Time, fn func(*Job)) (Job, error) {
	if !g.Matches(cur) {
		return Job{}, &JobConflictError{ID: cur.ID, Want: g, Actual: JobGuardOf(cur)}
	}
	next := cur
	next.Labels = slices.Clone(cur.Labels)
	fn(&next)
	if !CanJobTransition(cur.Status, next.Status) && !onlyRerunMarked(cur, next) && !onlyConcluded(cur, next) &&
		!startUndone(cur, next) {
		return Job{}, &JobTransitionError{ID: cur.ID, From: cur.Status, To: next.Status}
	}
	next.ID, next.CreatedAt = cur.ID, cur.CreatedAt
	next.Version = cur.Version + 1
	next.UpdatedAt = now
	return next, nil
}

// onlyRerunMarked reports whether next differs from cur in its re-run mark
// alone: the one change a final job takes, since an interrupted job is
// re-run once GitHub has completed it (and its run).
func onlyRerunMarked(cur, next Job) bool {
	probe := next
	probe.Rerun = cur.Rerun
	return reflect.DeepEqual(probe, cur)
}

// startUndone reports whether next sends a running job back to its queue
// as RequeueNotRun does: unbound, its start forgotten, its queue message
// to be sent. Only its agent's word had it running, and GitHub, which says
// its runner took another job, holds it queued still. Any other way back
// from running stays refused.
func startUndone(cur, next Job) bool {
	return cur.Status == JobRunning && next.Status == JobQueued && next.InstanceID == "" &&
		next.StartedAt.IsZero() && !next.Interrupted && next.SendPending
}

// onlyConcluded reports whether next gives a completed job without a
// conclusion one, and changes nothing else: the job's agent reported it
// finished knowing only how its runner exited, and GitHub says how it
// concluded after. A conclusion once given is never replaced.
func onlyConcluded(cur, next Job) bool {
	if cur.Status != JobCompleted || cur.Conclusion != "" || next.Conclusion == "" {
		return false
	}
	probe := next
	probe.Conclusion = ""
	return reflect.DeepEqual(probe, cur)
}

// JobFilter selects jobs; zero fields do not constrain.
type JobFilter struct {
	IDs      []int64 // any of these jobs
	Statuses []JobStatus
	Pool     string
	Instance string
	// UpdatedBefore keeps jobs last changed before this instant.
	UpdatedBefore time.Time
	// ToRerun keeps the interrupted jobs not re-run yet.
	ToRerun bool
	// Limit caps the result (0 = no cap); the newest jobs come first
	// when Newest is set, else the oldest.
	Limit  int
	Newest bool
	// After, when set, keeps the jobs that come after it in that order
	// (see ListPosition.Passed): the page that follows a page ending there.
	After *ListPosition[int64]
}

// JobTransitionRequest is one conditional job update of a batch.
type JobTransitionRequest struct {
	ID    int64
	Guard JobGuard
	Apply func(*Job)
}

// JobTransitionResult is the outcome of one JobTransitionRequest.
type JobTransitionResult struct {
	Job Job
	Err error
}
