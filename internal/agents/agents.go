// Package agents is the control plane's side of every handshake with an
// instance's agent: it turns signals (warm, registered, job-started,
// job-finished, deregistered, failed, interrupted) and heartbeats into guarded state
// changes, tells agents what to do next, and releases instances when their
// job ends.
package agents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// Policy is what happens to an instance after its job.
type Policy struct {
	Reuse   bool          // back to the resource pool, else terminated
	MaxJobs int           // retire after this many jobs (0: no limit)
	MaxAge  time.Duration // retire this long after launch (0: no limit)
	// IdleLifetime is how long a released instance may wait for its next
	// job; zero uses Deadlines.Ready.
	IdleLifetime time.Duration
}

// Options configure a Service.
type Options struct {
	Deadlines domain.Deadlines
	// Policy returns an instance's after-job policy (from its pool); nil
	// means terminate after one job.
	Policy func(in domain.Instance) Policy
	// HeartbeatFlush > 0 batches heartbeats: they are kept in memory and
	// written together at this interval by the loop (a fleet's heartbeats
	// cost one write a second, not one each). Zero writes each one at once.
	HeartbeatFlush time.Duration
	// HeartbeatResolution, with HeartbeatFlush: a beat within this of the
	// last one written for its instance is not written. The store's
	// heartbeat then lags the agent's by at most this (the provisioner's
	// HeartbeatLag must allow it), and 5,000 agents beating every 5 s cost
	// a row write each per resolution, not each per beat. 0: every beat.
	HeartbeatResolution time.Duration
	// Notices is told when an agent has something new to do, so that the
	// agent waiting for it wakes at once; nil tells nobody.
	Notices domain.AssignmentNotifier
	// Interrupted, when set, is told of every machine the cloud takes back
	// (the spot circuit breaker counts them by runner class).
	Interrupted func(runner string, at time.Time)
	// SpecHash, when set, returns a pool's current spec hash ("" when not
	// known): an instance of the pool launched before a roll is retired
	// after its job rather than offered for reuse.
	SpecHash func(ctx context.Context, pool string) string
}

// Service implements domain.AgentAPI and the release of instances.
type Service struct {
	store   Store
	queue   domain.Queue
	clock   domain.Clock
	log     *slog.Logger
	opts    Options
	metrics *metrics
	hub     *Hub
	verbs   domain.Lifecycle

	idOf    idCache
	beatsMu sync.Mutex
	beats   map[string]time.Time // heartbeats not yet written
	written map[string]time.Time // the last heartbeat written, by instance
}

var _ domain.AgentAPI = (*Service)(nil)

// New returns a service; reg may be nil.
func New(store Store, queue domain.Queue, clk domain.Clock, log *slog.Logger, reg prometheus.Registerer, opts Options) (*Service, error) {
	if opts.Deadlines == (domain.Deadlines{}) {
		opts.Deadlines = domain.DefaultDeadlines()
	}
	if opts.Policy == nil {
		opts.Policy = func(domain.Instance) Policy { return Policy{} }
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Service{store: store, queue: queue, clock: clk, log: log, opts: opts, metrics: m, hub: NewHub(),
		verbs: domain.NewLifecycle(opts.Deadlines), beats: map[string]time.Time{}}, nil
}

// Notify tells the instance's agent to ask for its next instruction.
func (s *Service) Notify(cloudID string) {
	if s.opts.Notices != nil && cloudID != "" {
		s.opts.Notices.Assigned(cloudID)
	}
}

// Registrations publishes, per instance id, each registered signal.
func (s *Service) Registrations() *Hub { return s.hub }

// Errors of the agent API. ErrUnknownInstance is transient (the row may be
// a moment away from recording its cloud id); a *RejectedError is final.
var ErrUnknownInstance = errors.New("no instance with that cloud id")

// RejectedError is a signal that does not fit the instance's state: it
// changes nothing and must not be retried.
type RejectedError struct {
	Kind   domain.SignalKind
	Reason string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%s signal rejected: %s", e.Kind, e.Reason)
}

// Unwrap makes errors.Is(err, domain.ErrRejected) hold.
func (e *RejectedError) Unwrap() error { return domain.ErrRejected }

func reject(k domain.SignalKind, format string, args ...any) error {
	return &RejectedError{Kind: k, Reason: fmt.Sprintf(format, args...)}
}

func (s *Service) lookup(ctx context.Context, cloudID string) (domain.Instance, error) {
	if cloudID == "" {
		return domain.Instance{}, errors.New("empty cloud id")
	}
	// A machine's row is read by id once known: a look-up by key, where
	// finding it by cloud id is an index query (on DynamoDB, one per agent
	// request otherwise).
	if id, ok := s.idOf.get(cloudID); ok {
		in, err := s.store.GetInstance(ctx, id)
		if err == nil && in.CloudID == cloudID {
			return in, nil
		}
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			return domain.Instance{}, fmt.Errorf("look up %s: %w", cloudID, err)
		}
	}
	rows, err := s.store.ListInstances(ctx, domain.InstanceFilter{CloudID: cloudID})
	if err != nil {
		return domain.Instance{}, fmt.Errorf("look up %s: %w", cloudID, err)
	}
	if len(rows) == 0 {
		return domain.Instance{}, fmt.Errorf("%s: %w", cloudID, ErrUnknownInstance)
	}
	in := rows[len(rows)-1]
	s.idOf.put(cloudID, in.ID)
	return in, nil
}

// Next tells the agent what to do: start the runner registered for it,
// release after a job, or wait.
func (s *Service) Next(ctx context.Context, cloudID string) (domain.Instruction, error) {
	in, err := s.lookup(ctx, cloudID)
	if err != nil {
		return domain.Instruction{}, err
	}
	return s.NextFor(ctx, in)
}

// NextFor is Next on a reading of the instance's row the caller has just
// made (the agent API's, to check the agent's token): the request reads
// the row once, which on DynamoDB halves what an agent's long polls and
// signals cost.
func (s *Service) NextFor(_ context.Context, in domain.Instance) (domain.Instruction, error) {
	s.idOf.put(in.CloudID, in.ID)
	switch {
	case in.State == domain.StateReleasing:
		return domain.Instruction{Kind: domain.InstructionRelease}, nil
	case in.RunnerConfig != "" && in.Job != "" && (in.State == domain.StateClaimed || in.State == domain.StateBooting):
		id, err := domain.ParseJobKey(in.Job)
		if err != nil {
			// Only bullpen writes job keys: a row holding another is broken.
			s.log.Error("instance bound to something that is not a job key; its agent waits", "instance", in.ID, "err", err)
			return domain.Instruction{Kind: domain.InstructionWait}, nil
		}
		return domain.Instruction{Kind: domain.InstructionRun, Assignment: domain.Assignment{
			JobID: id, RunnerName: in.RunnerName, JITConfig: in.RunnerConfig,
		}}, nil
	}
	return domain.Instruction{Kind: domain.InstructionWait}, nil
}

// knownSignals are the kinds Signal understands. Others are refused before
// anything else, so that an unknown kind is never retried as if the instance
// were merely not known yet, and never becomes a metric label.
var knownSignals = map[domain.SignalKind]bool{
	domain.SignalWarm: true, domain.SignalHeartbeat: true, domain.SignalRegistered: true,
	domain.SignalJobStarted: true, domain.SignalJobFinished: true, domain.SignalDeregistered: true,
	domain.SignalFailed: true, domain.SignalInterrupted: true,
}

// Signal applies one signal from an instance's agent.
func (s *Service) Signal(ctx context.Context, sig domain.Signal) error {
	if !knownSignals[sig.Kind] {
		return reject(sig.Kind, "unknown signal")
	}
	in, err := s.lookup(ctx, sig.CloudID)
	if err != nil {
		return err
	}
	return s.SignalFor(ctx, in, sig)
}

// SignalFor is Signal on a reading of the instance's row the caller has
// just made (see NextFor).
func (s *Service) SignalFor(ctx context.Context, in domain.Instance, sig domain.Signal) error {
	if !knownSignals[sig.Kind] {
		return reject(sig.Kind, "unknown signal")
	}
	if in.CloudID != sig.CloudID {
		return fmt.Errorf("signal from %s applied to instance %s of %s", sig.CloudID, in.ID, in.CloudID)
	}
	s.idOf.put(in.CloudID, in.ID)
	s.metrics.signals.WithLabelValues(string(sig.Kind)).Inc()
	switch sig.Kind {
	case domain.SignalWarm:
		return s.warm(ctx, in)
	case domain.SignalHeartbeat:
		return s.store.RecordHeartbeat(ctx, in.ID, s.clock.Now())
	case domain.SignalRegistered:
		return s.registered(ctx, in, sig)
	case domain.SignalJobStarted:
		return s.jobStarted(ctx, in, sig)
	case domain.SignalJobFinished:
		return s.jobFinished(ctx, in, sig)
	case domain.SignalDeregistered:
		return s.deregistered(ctx, in)
	case domain.SignalFailed:
		return s.failed(ctx, in, sig)
	case domain.SignalInterrupted:
		return s.interrupted(ctx, in, sig)
	}
	return reject(sig.Kind, "unknown signal")
}

// warm: boot and warm-up finished. A pool member becomes ready (for a job,
// or to be parked); an instance already bound to a job stays as it is.
func (s *Service) warm(ctx context.Context, in domain.Instance) error {
	if in.State != domain.StateBooting || in.Job != "" {
		return nil
	}
	now := s.clock.Now()
	p := s.opts.Policy(in)
	deadline := s.opts.Deadlines.Until(domain.StateReady, now)
	if in.Role == domain.RoleHot && p.IdleLifetime > 0 {
		// The converger retires a member idle past its lifetime once a
		// replacement is ready, which takes a boot; the deadline is the
		// backstop behind it, not what retires it, or the pool would be
		// left empty while the replacement boots.
		deadline = now.Add(p.IdleLifetime + s.opts.Deadlines.Booting)
	}
	w := s.verbs.Warm(in, deadline)
	_, err := s.store.Transition(ctx, w.ID, w.Guard, w.Apply)
	if errors.Is(err, domain.ErrConflict) {
		return nil // it moved on meanwhile; nothing to do
	}
	return err
}

// ownJob checks that a report names the instance's own job: the one it is
// bound to, or the one its runner was registered for (a real agent names its
// assignment and cannot know which job GitHub gave its runner). A report
// about any other job is refused: only GitHub's own reports move a job
// between instances (jobs.FollowRunner), so a token cannot act on another
// instance's job.
func ownJob(in domain.Instance, sig domain.Signal) error {
	if in.Job == "" || sig.Job == "" || (sig.Job != in.Job && sig.Job != runnerJob(in)) {
		return reject(sig.Kind, "instance is bound to job %q, not %q", in.Job, sig.Job)
	}
	return nil
}

func (s *Service) registered(ctx context.Context, in domain.Instance, sig domain.Signal) error {
	if err := ownJob(in, sig); err != nil {
		return err
	}
	switch in.State {
	case domain.StateRunning:
		return nil // a repeat
	case domain.StateClaimed, domain.StateBooting:
	default:
		return reject(sig.Kind, "instance is %s", in.State)
	}
	r := s.verbs.Register(in, s.clock.Now())
	if _, err := s.store.Transition(ctx, r.ID, r.Guard, r.Apply); err != nil {
		return fmt.Errorf("registered %s: %w", in.ID, err)
	}
	s.hub.Publish(in.ID)
	return nil
}

// runnerJob is the job the instance's runner was registered for.
func runnerJob(in domain.Instance) string {
	if _, job, ok := domain.ParseRunnerName(in.RunnerName); ok {
		return domain.JobKey(job)
	}
	return ""
}

// inOrder refuses a runner report that comes before its runner registered:
// the agent reports registered, job-started and job-finished in that order.
func inOrder(in domain.Instance, sig domain.Signal) error {
	if err := ownJob(in, sig); err != nil {
		return err
	}
	switch in.State {
	case domain.StateRunning:
		return nil
	case domain.StateClaimed, domain.StateBooting:
		return reject(sig.Kind, "the instance's runner has not registered")
	}
	// A failed instance's job may already be back in its queue: a late
	// report must not mark it running, or finished, with nobody serving it.
	return reject(sig.Kind, "instance is %s", in.State)
}

func (s *Service) jobStarted(ctx context.Context, in domain.Instance, sig domain.Signal) error {
	if err := inOrder(in, sig); err != nil {
		return err
	}
	if !in.JobStarted {
		r := s.verbs.JobStarted(in)
		if _, err := s.store.Transition(ctx, r.ID, r.Guard, r.Apply); err != nil {
			return fmt.Errorf("job-started %s: %w", in.ID, err)
		}
	}
	id, err := domain.ParseJobKey(in.Job)
	if err != nil {
		return reject(sig.Kind, "%v", err)
	}
	return jobs.MarkRunning(ctx, s.store, id, s.clock.Now(), "")
}

// jobFinished finishes the instance's job, but only while the job is still
// bound to this instance: a stale report from an instance that failed must
// not complete a job another instance now serves, nor release that one. A
// runner that ends before anyone saw its job start (neither its agent nor
// GitHub) did not run it: the job goes back to its queue and the instance,
// which cannot serve it, is terminated, as for a failure. A job that ran is
// completed without a conclusion until GitHub's completed delivery gives
// it one (see Finish).
func (s *Service) jobFinished(ctx context.Context, in domain.Instance, sig domain.Signal) error {
	if err := inOrder(in, sig); err != nil {
		if s.finishedHere(ctx, in, sig) {
			return nil // a repeat: the first report's answer was lost
		}
		return err
	}
	id, err := domain.ParseJobKey(in.Job)
	if err != nil {
		return reject(sig.Kind, "%v", err)
	}
	job, err := s.store.GetJob(ctx, id)
	if err != nil && !errors.Is(err, domain.ErrNotFound) {
		return fmt.Errorf("job-finished %s: %w", in.ID, err)
	}
	if err == nil && job.InstanceID != in.ID {
		return reject(sig.Kind, "job %s is no longer bound to this instance", in.Job)
	}
	if !in.JobStarted && (err != nil || job.Status != domain.JobRunning) {
		why := "the runner ended before its job started"
		if sig.Reason != "" {
			why += ": " + sig.Reason
		}
		return s.failed(ctx, in, domain.Signal{Kind: domain.SignalFailed, Job: in.Job, Reason: why})
	}
	// The agent's reason is how its runner process exited, not the job's
	// conclusion: that is GitHub's, and comes with its completed delivery.
	if _, err := s.end(ctx, id, ""); err != nil {
		return err
	}
	s.log.Info("job finished, as its agent reports", "instance", in.ID, "job", id, "runner_exit", sig.Reason)
	return nil
}

// finishedHere reports whether the job a job-finished signal names is
// already over on this very instance: the agent sent its report again
// because the answer to the first, which finished the job and released
// the instance, was lost (a timeout, a replica that died answering).
func (s *Service) finishedHere(ctx context.Context, in domain.Instance, sig domain.Signal) bool {
	id, err := domain.ParseJobKey(sig.Job)
	if err != nil {
		return false
	}
	job, err := s.store.GetJob(ctx, id)
	return err == nil && job.Status == domain.JobCompleted && job.InstanceID == in.ID
}

// interrupted: the cloud is taking the machine back (a spot interruption
// notice gives it two minutes). The instance leaves service at once; in the
// same change a job it had not started goes back to its queue and the
// instance is terminated, and one it had started is marked interrupted
// while the instance runs on until the notice's time: the job may finish
// before the machine goes, and if it does not, GitHub fails it and the
// reaper re-runs it once its run completes. An instance that changed
// meanwhile (a warm signal, a claim) is read again: the notice does not
// wait for the agent's retry. A repeated notice changes nothing.
func (s *Service) interrupted(ctx context.Context, in domain.Instance, sig domain.Signal) error {
	const reason = "spot interruption: the cloud is taking the machine back"
	id := in.ID
	for range releaseAttempts {
		if in.State == domain.StateTerminating || in.State.Terminal() || in.Leaving() {
			return nil
		}
		now := s.clock.Now()
		notice := noticeTime(sig.Reason, now)
		done, ok, err := jobs.Interrupt(ctx, s.store, s.queue, in, reason, notice, s.opts.Deadlines.Until(domain.StateTerminating, now))
		if ok {
			s.noteInterruption(in, sig, done, err, now)
			return nil
		}
		if err != nil {
			return fmt.Errorf("interrupted %s: %w", id, err)
		}
		if in, err = s.store.GetInstance(ctx, id); err != nil {
			return fmt.Errorf("interrupted %s: %w", id, err)
		}
	}
	return fmt.Errorf("interrupted %s: %w", id, domain.ErrConflict) // the agent retries
}

// spotNotice is how far ahead EC2 gives notice of a spot interruption.
const spotNotice = 2 * time.Minute

// noticeTime is when the cloud takes the machine back, as the agent's
// report of the notice says ("<action> at <RFC 3339 time>", EC2's
// instance-action), but no later than spotNotice from now: the agent reads
// the notice within seconds of its coming, and the report is only as
// trustworthy as the machine. A report without a time it can read gets
// the whole spotNotice.
func noticeTime(report string, now time.Time) time.Time {
	latest := now.Add(spotNotice)
	i := strings.LastIndex(report, " at ")
	if i < 0 {
		return latest
	}
	at, err := time.Parse(time.RFC3339, strings.TrimSpace(report[i+len(" at "):]))
	if err != nil || at.After(latest) {
		return latest
	}
	return at
}

// noteInterruption logs and counts an instance taken out of service by an
// interruption, and tells the spot circuit breaker. sendErr is a failed
// send of its requeued job's message: the job is in the database, and the
// reaper sends it, so it is no reason for the agent to report again.
func (s *Service) noteInterruption(in domain.Instance, sig domain.Signal, done jobs.Interruption, sendErr error, now time.Time) {
	job := "none"
	attrs := []any{"instance", in.ID, "runner", in.Runner, "state", in.State, "notice", sig.Reason}
	if j := done.Job; j != nil {
		job = "requeued"
		if j.Interrupted {
			job = "started"
		}
		attrs = append(attrs, "job", j.ID, "repo", j.Repo, "job_outcome", interruptedJobOutcome(*j))
	}
	if done.Instance.Leaving() {
		// Terminated now, the machine would cut its job short up to two
		// minutes before the cloud does.
		attrs = append(attrs, "machine", "runs its started job on until the notice's time, then terminated", "until", done.Instance.Deadline)
	} else {
		attrs = append(attrs, "machine", "terminated now")
	}
	s.metrics.interruptions.WithLabelValues(job).Inc()
	s.log.Warn("spot interruption: instance out of service", attrs...)
	if sendErr != nil {
		s.log.Warn("interrupted instance's job is back in its queue, its message not sent yet", "instance", in.ID, "err", sendErr)
	}
	if s.opts.Interrupted != nil {
		s.opts.Interrupted(in.Runner, now)
	}
}

// interruptedJobOutcome says, for the log, what becomes of the job of an
// interrupted instance.
func interruptedJobOutcome(j domain.Job) string {
	switch {
	case !j.Interrupted:
		return "back in its queue"
	case j.Spec.RerunsInterrupted():
		return "runs until the machine goes; if GitHub fails it, re-run once its workflow run completes"
	}
	return "runs until the machine goes; if GitHub fails it, not re-run (retry: false)"
}
