// Package reaper holds the loops that make sure nothing bullpen launched
// outlives its purpose. The terminator carries out terminations that other
// loops decided (they mark rows terminating; it makes the cloud calls in
// batches of at most 50 and closes the rows).
package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/promreg"
)

// Terminator terminates the machines of rows marked terminating.
type Terminator struct {
	Store Store
	// Queue takes the jobs of expired instances back (their unstarted job
	// returns to its queue with the instance's expiry).
	Queue    domain.Queue
	Cloud    domain.Cloud
	Clock    domain.Clock
	Log      *slog.Logger
	Interval time.Duration // default 5 s
	// Deadlines are the per-state allowances; zero means the defaults.
	Deadlines domain.Deadlines
	// AgentGrace holds the deadlines of the states an agent moves on
	// (booting, ready, claimed, running, releasing) for this long after
	// Init, plus the agents' longest backoff, as the reconciler's silence
	// allowance has it (AgentAllowance): after an outage of the control
	// plane those deadlines passed because agents could not report, not
	// because their machines failed. Set it to the reconciler's
	// SilentAfter. 0: none.
	AgentGrace time.Duration
	metrics    *terminatorMetrics // nil until Init: nothing is counted
	heard      hearing            // since when agents could be heard
	refused    setAside           // rows whose machine the cloud refused to terminate
}

// agentAllowance is how long after Init the deadlines of the agents'
// states are held (see AgentGrace).
func (t *Terminator) agentAllowance() time.Duration {
	if t.AgentGrace <= 0 {
		return 0
	}
	return AgentAllowance(t.AgentGrace)
}

// AgentAllowance is how long after the control plane could hear agents
// again (its start, or the end of a gap in its loop) an agent unheard for
// silentAfter may still come back: each agent tries again only at the end
// of its own backoff, which may have grown to domain.AgentBackoffMax. The
// reconciler judges no silence before it, and the terminator holds the
// deadlines of the agents' states until then.
func AgentAllowance(silentAfter time.Duration) time.Duration {
	return silentAfter + domain.AgentBackoffMax
}

// every is the time between two sweeps.
func (t *Terminator) every() time.Duration {
	if t.Interval <= 0 {
		return 5 * time.Second
	}
	return t.Interval
}

// Init registers the metrics; reg may be nil.
func (t *Terminator) Init(reg prometheus.Registerer) error {
	t.heard = hearing{since: t.Clock.Now()}
	m, err := newTerminatorMetrics(reg)
	t.metrics = m
	return err
}

// Loop marks what is past its deadline and terminates what is marked, every
// Interval (default 5 s).
func (t *Terminator) Loop() loop.Loop {
	return loop.Loop{Name: "terminator", Every: t.every(), Step: func(ctx context.Context) error {
		_, err := t.Expire(ctx)
		if err != nil {
			err = fmt.Errorf("deadline sweep: %w", err)
		}
		_, serr := t.Sweep(ctx)
		return errors.Join(err, serr)
	}}
}

// Sweep terminates what is marked now and reports how many rows it closed.
func (t *Terminator) Sweep(ctx context.Context) (int, error) {
	rows, err := t.Store.ListInstances(ctx, domain.InstanceFilter{States: []domain.State{domain.StateTerminating}})
	if err != nil {
		return 0, fmt.Errorf("list terminating instances: %w", err)
	}
	now := t.Clock.Now()
	t.refused.keep(rowIDs(rows))
	var done, withMachine []domain.Instance
	for _, in := range rows {
		switch {
		case in.CloudID == "":
			done = append(done, in)
		case t.refused.waiting(in.ID, now):
			// asked again once its wait is over
		default:
			withMachine = append(withMachine, in)
		}
	}
	var errs []error
	for _, batch := range domain.Chunk(withMachine, domain.MaxBatch) {
		ok, err := t.terminate(ctx, batch, now)
		done = append(done, ok...)
		errs = append(errs, err)
	}
	t.refused.forget(rowIDs(done))
	reqs := make([]domain.TransitionRequest, len(done))
	for i, in := range done {
		reqs[i] = t.verbs().Close(in)
	}
	closed := 0
	if len(reqs) > 0 {
		res, err := t.Store.TransitionBatch(ctx, reqs)
		errs = append(errs, err)
		for _, r := range res {
			if r.Err == nil {
				closed++
			}
		}
	}
	if closed > 0 {
		t.log().Info("terminated instances", "count", closed)
	}
	t.metrics.add(actionTerminated, closed)
	return closed, errors.Join(errs...)
}

func (t *Terminator) verbs() domain.Lifecycle { return domain.NewLifecycle(t.Deadlines) }

func (t *Terminator) log() *slog.Logger {
	if t.Log == nil {
		return slog.Default()
	}
	return t.Log
}

// terminate makes one batched call. The provider acts on the ids it knows
// and names the others: those machines are gone already, so their rows are
// done too. A machine the cloud refuses to terminate (protected from
// termination) is named as refused while the others are terminated: their
// rows are done, its row stays terminating and is set aside (setAside), so
// that neither the batch nor the loop fails at every sweep for one machine
// only a person can release.
func (t *Terminator) terminate(ctx context.Context, batch []domain.Instance, now time.Time) ([]domain.Instance, error) {
	ids := make([]string, len(batch))
	for i, in := range batch {
		ids[i] = in.CloudID
	}
	err := t.Cloud.Terminate(ctx, ids)
	if domain.TerminateDone(err) {
		return batch, nil
	}
	refusal, ok := errors.AsType[*domain.RefusedInstancesError](err)
	if !ok {
		t.metrics.cloudError(opTerminate)
		return nil, fmt.Errorf("terminate %d instances: %w", len(ids), err)
	}
	var done, refused []domain.Instance
	for _, in := range batch {
		if slices.Contains(refusal.IDs, in.CloudID) {
			refused = append(refused, in)
		} else {
			done = append(done, in)
		}
	}
	t.metrics.add(actionRefused, len(refused))
	t.setAside(refused, refusal, now)
	return done, nil
}

// setAside notes rows whose machine the cloud refused to terminate. The
// first refusal of a row is logged at WARN, since a person must lift what
// protects the machine; later ones, every time the wait doubles, at
// DEBUG.
func (t *Terminator) setAside(rows []domain.Instance, refusal *domain.RefusedInstancesError, now time.Time) {
	var first, again []string
	var wait time.Duration
	for _, in := range rows {
		tries, w := t.refused.note(in.ID, now)
		wait = max(wait, w)
		if tries == 1 {
			first = append(first, in.ID+" ("+in.CloudID+")")
		} else {
			again = append(again, in.ID)
		}
	}
	if len(first) > 0 {
		t.log().Warn("the cloud refuses to terminate machines; their rows stay terminating and are asked again, less and less often, until the cause is lifted",
			"instances", first, "code", refusal.Code, "reason", refusal.Reason, "next_try_in", wait)
	}
	if len(again) > 0 {
		t.log().Debug("the cloud still refuses to terminate machines", "instances", again, "code", refusal.Code,
			"reason", refusal.Reason, "next_try_in", wait)
	}
}

// The wait before a machine the cloud refused to terminate is asked about
// again: it doubles at each refusal, from a minute up to an hour, so that
// a machine released soon goes soon, and one left protected costs a call
// an hour.
const (
	refusedFirstWait = time.Minute
	refusedMostWait  = time.Hour
)

// setAside holds what the cloud refused to terminate (the terminator's
// rows, by row id; the reconciler's orphans, by machine id), with their
// refusals so far and when to ask again. It lives in the process: after a
// restart each is asked once more, and its refusal logged again.
type setAside struct {
	mu   sync.Mutex
	rows map[string]refusedRow
}

type refusedRow struct {
	tries int
	next  time.Time
}

// note records one more refusal of row id at now and returns how many
// there were and how long to wait before the next try.
func (s *setAside) note(id string, now time.Time) (int, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows == nil {
		s.rows = map[string]refusedRow{}
	}
	r := s.rows[id]
	r.tries++
	wait := domain.Doubling(refusedFirstWait, refusedMostWait, r.tries)
	r.next = now.Add(wait)
	s.rows[id] = r
	return r.tries, wait
}

// waiting says whether row id was refused and its wait is not over at now.
func (s *setAside) waiting(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[id]
	return ok && now.Before(r.next)
}

// keep forgets every id not among ids: a row closed meanwhile (its
// machine went, and the reconciler saw it) or deleted, a machine gone.
func (s *setAside) keep(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.rows) == 0 {
		return
	}
	live := make(map[string]bool, len(ids))
	for _, id := range ids {
		live[id] = true
	}
	maps.DeleteFunc(s.rows, func(id string, _ refusedRow) bool { return !live[id] })
}

// forget drops ids whose machine is terminated at last.
func (s *setAside) forget(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.rows, id)
	}
}

// known says whether id was refused before and is still held.
func (s *setAside) known(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.rows[id]
	return ok
}

func rowIDs(rows []domain.Instance) []string {
	ids := make([]string, len(rows))
	for i, in := range rows {
		ids[i] = in.ID
	}
	return ids
}

// What the terminator counts: rows it marked because their deadline
// passed, rows it closed once their machine was terminated (or had none,
// or was gone already), and the cloud calls that failed.
const (
	actionExpired    = "expired"
	actionTerminated = "terminated"
	// actionRefused counts each time the cloud refused to terminate a
	// row's machine while it took the rest of the batch: no failed call,
	// but a machine left running and billed until a person acts.
	actionRefused = "refused"
	opTerminate   = "TerminateInstances" // the call's EC2 name, as the other loops' cloud errors
)

type terminatorMetrics struct {
	actions     *prometheus.CounterVec
	expired     *prometheus.CounterVec
	cloudErrors *prometheus.CounterVec
}

// expirableStates are the states Expire ends rows in: every state but
// terminating and terminated.
func expirableStates() []domain.State {
	var states []domain.State
	for _, s := range domain.States {
		if s != domain.StateTerminating && s != domain.StateTerminated {
			states = append(states, s)
		}
	}
	return states
}

// newTerminatorMetrics registers the terminator's counters, every series
// present from the start at zero: a dashboard shows none rather than no
// data, and an alert on an increase sees the first failure.
func newTerminatorMetrics(reg prometheus.Registerer) (*terminatorMetrics, error) {
	m := &terminatorMetrics{
		actions: promreg.Counters("bullpen_terminator_actions_total",
			"Instances the terminator acted on, by kind (expired: marked terminating as their state's deadline passed; terminated: closed once their machine was terminated; refused: the cloud refused to terminate their machine, which stays running, each time it was asked).",
			"kind"),
		expired: promreg.Counters("bullpen_terminator_expired_total",
			"Instances marked terminating as their state's deadline passed, by that state: releasing counts the releases that timed out before their agent's deregistered report came, running the jobs cut short at the running deadline and the machines taken back at their notice time.",
			"state"),
		cloudErrors: promreg.Counters("bullpen_terminator_cloud_errors_total",
			"Failed cloud calls made by the terminator, by operation; the rows stay terminating and the next sweep tries again.",
			"op"),
	}
	if err := promreg.Register(reg, "terminator", m.actions, m.expired, m.cloudErrors); err != nil {
		return nil, err
	}
	promreg.AtZero(m.actions, actionExpired, actionTerminated, actionRefused)
	for _, s := range expirableStates() {
		promreg.AtZero(m.expired, string(s))
	}
	promreg.AtZero(m.cloudErrors, opTerminate)
	return m, nil
}

func (m *terminatorMetrics) add(kind string, n int) {
	if m != nil && n > 0 {
		m.actions.WithLabelValues(kind).Add(float64(n))
	}
}

// expiredIn counts one row Expire ended in state s.
func (m *terminatorMetrics) expiredIn(s domain.State) {
	if m != nil {
		m.expired.WithLabelValues(string(s)).Inc()
	}
}

func (m *terminatorMetrics) cloudError(op string) {
	if m != nil {
		m.cloudErrors.WithLabelValues(op).Inc()
	}
}
