// Package domain holds bullpen's model: instances and their state machine,
// pools, runner specs, jobs, and the ports (store, cloud, clock) the rest of
// the system is written against. It imports only the standard library.
package domain

import (
	"errors"
	"fmt"
	"time"
)

// State is where an instance is in its life. Every change of state goes
// through Store.Transition, guarded by (state, job, version).
type State string

const (
	// StatePending: the row is written before the cloud call. After a
	// crash between the two, the row expires at its deadline, and a machine
	// the call did launch carries the stack's tag and is reaped as an
	// orphan (no row knows its cloud id).
	StatePending State = "pending"
	// StateBooting: the cloud id is known; the agent is not ready yet
	// (pools call this warming-up).
	StateBooting State = "booting"
	// StateReady: running and idle. A hot pool member, a stopped-pool member
	// that finished warm-up and waits to be stopped, or a released instance
	// waiting in the resource pool.
	StateReady State = "ready"
	// StateStopping and StateStopped: a stopped-pool member being parked.
	StateStopping State = "stopping"
	StateStopped  State = "stopped"
	// StateClaimed: reserved for one job (pools call this detached); being
	// started if it was stopped.
	StateClaimed State = "claimed"
	// StateRunning: the runner registered for its job.
	StateRunning State = "running"
	// StateReleasing: the job is done; waiting for the agent to deregister.
	StateReleasing State = "releasing"
	// StateTerminating, StateTerminated and StateError: on the way out.
	StateTerminating State = "terminating"
	StateTerminated  State = "terminated"
	StateError       State = "error"
)

// States lists every state in lifecycle order.
var States = []State{
	StatePending, StateBooting, StateReady, StateStopping, StateStopped,
	StateClaimed, StateRunning, StateReleasing,
	StateTerminating, StateTerminated, StateError,
}

// transitions is the explicit state machine: from → the states it may move to.
// A state may always be rewritten in place (same state, other fields), except
// the terminal one.
var transitions = stateMachine[State]{
	StatePending: {StateBooting, StateError, StateTerminating},
	// A cold-start instance is created bound to its job and registers for
	// it straight from booting.
	StateBooting:     {StateReady, StateRunning, StateStopped, StateError, StateTerminating},
	StateReady:       {StateStopping, StateClaimed, StateError, StateTerminating},
	StateStopping:    {StateStopped, StateError, StateTerminating},
	StateStopped:     {StateBooting, StateClaimed, StateError, StateTerminating},
	StateClaimed:     {StateRunning, StateReady, StateStopped, StateError, StateTerminating},
	StateRunning:     {StateReleasing, StateError, StateTerminating},
	StateReleasing:   {StateReady, StateError, StateTerminating},
	StateError:       {StateTerminating},
	StateTerminating: {StateTerminated},
	StateTerminated:  {},
}

// Valid reports whether s is a known state.
func (s State) Valid() bool { return transitions.known(s) }

// Terminal reports whether nothing can follow s.
func (s State) Terminal() bool { return s == StateTerminated }

// CanTransition reports whether the state machine allows from → to.
func CanTransition(from, to State) bool { return transitions.allows(from, to, State.Terminal) }

// Role says why an instance exists.
type Role string

const (
	RoleHot      Role = "hot"       // pool member kept running
	RoleStopped  Role = "stopped"   // pool member warmed then parked
	RoleOnDemand Role = "on-demand" // created for a job (cold start), or back from one for reuse
)

// Instance is bullpen's record of one machine. ID is bullpen's own, assigned
// before the cloud is called; CloudID is the provider's.
type Instance struct {
	ID       string
	CloudID  string
	Pool     string // the pool it was made for or serves jobs of; "" for a job outside pools
	Role     Role
	Runner   string // runner spec name; also the resource-pool class
	SpecHash string
	LaunchID string // shared by the rows of one create call

	State      State
	Job        string // job this instance is bound to; "" when none
	JobStarted bool   // the job's steps began: never touch it
	Version    int64
	Deadline   time.Time // past it, the instance is the reaper's

	CreatedAt    time.Time
	UpdatedAt    time.Time
	StateSince   time.Time
	RunningSince time.Time // when its machine was launched: the clock of the dangling rule
	JobsServed   int
	Reason       string    // why it errored or is being terminated
	Heartbeat    time.Time // the agent's last heartbeat (Store.RecordHeartbeat)

	// The just-in-time runner registered for the job this instance was
	// given. The registration belongs to the instance: GitHub may hand the
	// runner another queued job with the same labels (jobs.FollowRunner), but the
	// instance's agent still starts this runner. RunnerConfig is a
	// credential: never logged, never returned but to the instance's agent.
	RunnerName   string
	RunnerConfig string `json:"-"`

	// Agent credentials, stored only as hashes (domain.HashSecret). Each
	// machine's own bootstrap secret (MachineSecret of its launch's secret
	// and its cloud id), from or derived from the launch data, is
	// exchanged once for the instance's own token; the token authenticates every later
	// agent call, for this instance alone, until the instance ends.
	BootstrapHash  string `json:"-"`
	AgentTokenHash string `json:"-"`

	// Attributes used by the resource-pool filters.
	InstanceType string
	UsageClass   string // "spot" or "on-demand"
	CPU          int
	MemoryMiB    int
}

// Detached reports whether the instance has left pool management: it is bound
// to a job or on its way to one. Rebalancing never touches such an instance.
func (i Instance) Detached() bool {
	switch i.State {
	case StateClaimed, StateRunning, StateReleasing:
		return true
	}
	return i.Job != "" || i.JobStarted
}

// Expired reports whether the instance is past its deadline at now.
func (i Instance) Expired(now time.Time) bool {
	return !i.Deadline.IsZero() && !now.Before(i.Deadline)
}

// Guard is the condition of a transition: the row must be in State, bound to
// Job (exactly; "" means unbound) and, when Version is non-zero, at Version.
type Guard struct {
	State   State
	Job     string
	Version int64
}

// GuardOf returns the guard that matches i exactly as read.
func GuardOf(i Instance) Guard { return Guard{State: i.State, Job: i.Job, Version: i.Version} }

// Matches reports whether i satisfies g.
func (g Guard) Matches(i Instance) bool {
	return i.State == g.State && i.Job == g.Job && (g.Version == 0 || i.Version == g.Version)
}

// Errors returned by stores. Callers branch on them with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict: guard did not match")
	ErrExists   = errors.New("already exists")
)

// TransitionError reports a change the state machine forbids.
type TransitionError struct {
	ID       string
	From, To State
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("instance %s: illegal transition %s -> %s", e.ID, e.From, e.To)
}

// ConflictError says which part of the guard failed; it wraps ErrConflict.
type ConflictError struct {
	ID     string
	Want   Guard
	Actual Guard
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("instance %s: expected state=%s job=%q version=%d, found state=%s job=%q version=%d",
		e.ID, e.Want.State, e.Want.Job, e.Want.Version, e.Actual.State, e.Actual.Job, e.Actual.Version)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// ApplyTransition is the one place a store's conditional update is decided:
// it checks g against cur, applies fn to a copy, validates the state machine,
// and stamps the bookkeeping fields. Stores call it inside their atomic
// section (a transaction, a conditional write) and persist the result.
func ApplyTransition(cur Instance, g Guard, now time.Time, fn func(*Instance)) (Instance, error) {
	if !g.Matches(cur) {
		return Instance{}, &ConflictError{ID: cur.ID, Want: g, Actual: GuardOf(cur)}
	}
	next := cur
	fn(&next)
	if !CanTransition(cur.State, next.State) {
		return Instance{}, &TransitionError{ID: cur.ID, From: cur.State, To: next.State}
	}
	// Identity and bookkeeping belong to the store, not the caller.
	next.ID, next.CreatedAt = cur.ID, cur.CreatedAt
	next.Version = cur.Version + 1
	next.UpdatedAt = now
	if next.State != cur.State {
		next.StateSince = now
	}
	return next, nil
}

// MachineGone is the one rule that says an instance's machine no longer
// exists: the cloud lists it terminated or shutting down, or does not list
// it although the row has existed for grace (listings are eventually
// consistent: a machine just created may not be listed yet). A row without
// a cloud id has no machine to lose.
func MachineGone(in Instance, m CloudInstance, listed bool, now time.Time, grace time.Duration) bool {
	if in.CloudID == "" || in.State == StateTerminated {
		return false
	}
	if listed {
		return m.State == CloudTerminated || m.State == CloudShuttingDown
	}
	return !now.Before(in.CreatedAt.Add(grace))
}
