package domain

import (
	"context"
	"errors"
	"time"
)

// Deadlines says how long an instance may stay in each state (the design's
// "threshold"). A row past its deadline is terminated: by the converger for
// pool members, by the reaper for everything else.
type Deadlines struct {
	Pending     time.Duration // create call in flight
	Booting     time.Duration // boot and warm-up
	Ready       time.Duration // idle, when no pool lifetime applies
	Stopping    time.Duration
	Stopped     time.Duration // a parked pool member is refreshed after this
	Claimed     time.Duration // start, registration and post-claim checks
	Running     time.Duration // the longest job bullpen lets run
	Releasing   time.Duration // waiting for the agent to deregister
	Terminating time.Duration // terminate call retried until then
	Error       time.Duration
}

// DefaultDeadlines are the documented defaults.
func DefaultDeadlines() Deadlines {
	return Deadlines{
		Pending:     5 * time.Minute,
		Booting:     10 * time.Minute,
		Ready:       10 * time.Minute,
		Stopping:    5 * time.Minute,
		Stopped:     7 * 24 * time.Hour,
		Claimed:     5 * time.Minute,
		Running:     24 * time.Hour,
		Releasing:   2 * time.Minute,
		Terminating: 10 * time.Minute,
		Error:       5 * time.Minute,
	}
}

// For returns the allowance for s; zero for the terminal state.
func (d Deadlines) For(s State) time.Duration {
	switch s {
	case StatePending:
		return d.Pending
	case StateBooting:
		return d.Booting
	case StateReady:
		return d.Ready
	case StateStopping:
		return d.Stopping
	case StateStopped:
		return d.Stopped
	case StateClaimed:
		return d.Claimed
	case StateRunning:
		return d.Running
	case StateReleasing:
		return d.Releasing
	case StateTerminating:
		return d.Terminating
	case StateError:
		return d.Error
	}
	return 0
}

// Until returns the deadline for entering s at now; zero for terminal states.
func (d Deadlines) Until(s State, now time.Time) time.Time {
	a := d.For(s)
	if a == 0 {
		return time.Time{}
	}
	return now.Add(a)
}

// SignalKind names what an instance's agent reports about itself. The
// meanings follow the design: registered is UD_REG_OK, deregistered is
// UD_REMOVE_REG_OK.
type SignalKind string

const (
	SignalWarm         SignalKind = "warm" // boot and warm-up finished
	SignalHeartbeat    SignalKind = "heartbeat"
	SignalRegistered   SignalKind = "registered"
	SignalJobStarted   SignalKind = "job-started"
	SignalJobFinished  SignalKind = "job-finished"
	SignalDeregistered SignalKind = "deregistered"
	SignalFailed       SignalKind = "failed"
	// SignalInterrupted: the cloud gave the machine notice that it is being
	// taken back (a spot interruption); it has about two minutes.
	SignalInterrupted SignalKind = "interrupted"
)

// Signal is one report from an instance, identified by its cloud id.
type Signal struct {
	CloudID string
	Kind    SignalKind
	Job     string
	Reason  string
	At      time.Time
}

// SignalSink receives instance signals (from the agent API, or from the
// simulated agents of the simulated cloud). An error means "not taken, try
// again later", unless it wraps ErrRejected: the signal does not fit the
// instance's state, changed nothing, and must not be retried.
type SignalSink interface {
	Signal(ctx context.Context, s Signal) error
}

// ErrRejected marks an agent call the control plane refuses for good (a
// signal out of order, for another job, after a timeout).
var ErrRejected = errors.New("rejected")
