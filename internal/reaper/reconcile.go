package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/promreg"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// Reconciler is the reaper's slow loop (the provisioning design's "refresh"): it makes the
// store, the cloud and GitHub agree, and keeps the store bounded. Every
// change it makes is a guarded write, so it is safe on any replica.
type Reconciler struct {
	Store        Store
	Queue        domain.Queue
	Cloud        domain.Cloud
	GitHub       domain.GitHub
	Clock        domain.Clock
	Log          *slog.Logger
	ControllerID string
	// Scopes says where to look for queued jobs and dead runners.
	Scopes func(ctx context.Context) []domain.Scope
	// Ours says whether a job with these labels is this environment's to
	// serve (the intake's routing decision), rejected or not. A queued job
	// the store does not know is admitted only when it is: the intake
	// never records anyone else's (GitHub-hosted jobs, other runners',
	// another environment's), so admitting one would repeat every cycle
	// for as long as it stays queued. Required.
	Ours func(labels []string) bool
	// Takes says whether the configuration in force serves a job with
	// these labels: the intake would route it, not reject it. A rejected
	// job GitHub still holds queued is readmitted when it does: it was
	// rejected under an earlier configuration (a pool added since, which
	// the replica that took its webhook had not loaded yet). Nil: no job
	// is readmitted.
	Takes func(labels []string) bool
	Options
	metrics *reconcileMetrics
	// heard is since when agents could be heard: silence counts from it at
	// the latest.
	heard hearing
	// asked is when GitHub was last asked about each stranded job, so
	// that the jobs asked least lately go first.
	asked askedAt
	// waitAnswered is when GitHub last said something about each job
	// waiting for a runner (listed it queued, or answered a look-up) or
	// was last asked about it, so that it is asked about again only once
	// that is old, the jobs asked least lately first.
	waitAnswered askedAt
	// spared holds the instances kept although their agent is silent, as
	// their job started and nothing else says it ended, by id.
	spared map[string]spared
	// refusedOrphans holds the orphans the cloud refused to terminate, by
	// machine id.
	refusedOrphans setAside
	// rejectedAsked is when GitHub was last asked about each rejected job
	// looked up (rejectedJobs); notQueued holds those GitHub has ended.
	rejectedAsked askedAt
	notQueued     map[int64]bool
}

// Options tune the reconciler; zero values take the documented defaults.
type Options struct {
	Interval time.Duration // default 1 min
	// OrphanGrace: a machine tagged with this controller's id that no row
	// knows is terminated once this old (its creator may still be about to
	// record it). Default 10 min.
	OrphanGrace time.Duration
	// GoneGrace: a row whose machine the cloud no longer lists is closed
	// once this old (cloud listings are eventually consistent). Default 2 min.
	GoneGrace time.Duration
	// JobRetention: completed and rejected jobs are deleted this long after
	// their last change. Default 72 h.
	JobRetention time.Duration
	// InstanceRetention: terminated rows are deleted this long after they
	// ended. Default 24 h.
	InstanceRetention time.Duration
	// RunnerPrefix marks the runners bullpen registered; only those are
	// cleaned up. Default "bp-".
	RunnerPrefix string
	// TerminatingAllowance is the deadline given to an instance the
	// reaper marks terminating; default 10 min.
	TerminatingAllowance time.Duration
	// RunningAllowance is the longest bullpen lets a job run (the running
	// state's deadline): a started job whose instance has ended, and about
	// which GitHub has given no answer by then, is given up. Default 24 h.
	RunningAllowance time.Duration
	// SilentAfter: an instance whose agent should be alive (ready, claimed,
	// running, releasing) and has not been heard from for this long —
	// neither a heartbeat nor a state change — is terminated, unless its
	// job started and nothing else says that job ended (see silent).
	// Default 3 min.
	SilentAfter time.Duration
	// CancelRejected: a job bullpen rejected that GitHub still lists as
	// queued has its workflow run cancelled, every cycle until GitHub no
	// longer lists it, once it has been rejected for RejectedGrace and the
	// configuration in force still does not serve it (see
	// rejectedStillQueued). Without it the job waits for GitHub's 24-hour
	// timeout.
	CancelRejected bool
	// RejectedGrace is how long a rejected job is left before its run is
	// cancelled; default DefaultRejectedGrace. It must outlast a reload of
	// the configuration, so that a job rejected for a pool a reload is
	// about to put in force is readmitted rather than cancelled.
	RejectedGrace time.Duration
	// StaleClaimAfter: an instance claimed this long for a job that another
	// instance serves, or that has ended, is terminated (its claimer died).
	// Default 1 min.
	StaleClaimAfter time.Duration
}

// DefaultSilentAfter is Options.SilentAfter's default.
const DefaultSilentAfter = 3 * time.Minute

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Interval, time.Minute)
	def(&o.OrphanGrace, 10*time.Minute)
	def(&o.GoneGrace, 2*time.Minute)
	def(&o.JobRetention, 72*time.Hour)
	def(&o.InstanceRetention, 24*time.Hour)
	def(&o.SilentAfter, DefaultSilentAfter)
	def(&o.StaleClaimAfter, time.Minute)
	def(&o.RejectedGrace, DefaultRejectedGrace)
	def(&o.TerminatingAllowance, domain.DefaultDeadlines().Terminating)
	def(&o.RunningAllowance, domain.DefaultDeadlines().Running)
	if o.RunnerPrefix == "" {
		o.RunnerPrefix = "bp-"
	}
}

// Init applies the defaults and registers the metrics; reg may be nil.
func (r *Reconciler) Init(reg prometheus.Registerer) error {
	if r.Ours == nil {
		return errors.New("reaper: the reconciler has no Ours: it cannot tell bullpen's queued jobs from anyone else's")
	}
	r.Options.defaults()
	r.heard = hearing{since: r.Clock.Now()}
	r.waitAnswered = askedAt{}
	r.spared = map[string]spared{}
	r.rejectedAsked, r.notQueued = askedAt{}, map[int64]bool{}
	if r.Log == nil {
		r.Log = slog.Default()
	}
	m, err := newReconcileMetrics(reg)
	r.metrics = m
	return err
}

// Report counts what one cycle did.
type Report struct {
	// Silent counts the instances terminated for their agent's silence;
	// SilentKept those whose agent fell silent while their job ran, kept
	// as nothing else said the job had ended (each once a silence).
	Orphans, Gone, Silent, SilentKept, StaleClaims, DeadRunners, Recovered, Requeued, Resent, Rerun, Cancelled, JobsDeleted, RowsDeleted int
	// Readmitted counts the rejected jobs sent back to the intake, as the
	// configuration in force now serves them.
	Readmitted int
	// OrphansRefused counts the orphans the cloud refused to terminate
	// (protected from termination), each time it was asked.
	OrphansRefused int
	// Completed and Abandoned are assigned or running jobs whose instance
	// ended and whose completed webhook never came: completed as GitHub
	// reports them, or given up when GitHub no longer has them or gave no
	// answer about them within the running allowance.
	Completed, Abandoned int
	// CompletedWaiting and AbandonedWaiting are jobs waiting for a runner
	// that GitHub ended before they started and whose completed webhook
	// never came: completed as GitHub reports them, or given up when GitHub
	// no longer has them.
	CompletedWaiting, AbandonedWaiting int
	// Scopes counts the scopes looked at, by outcome.
	Scopes ScopeOutcomes
}

// ScopeOutcomes counts the scopes of a cycle by what their look at GitHub
// gave: answered, failed (a 404 too, which may mean lost access), or gone
// (GitHub answered 410 for the repository or organisation).
type ScopeOutcomes struct {
	OK, Failed, Gone int
}

// Loop reconciles every Interval.
func (r *Reconciler) Loop() loop.Loop {
	return loop.Loop{Name: "reaper", Every: r.Interval, Step: func(ctx context.Context) error {
		_, err := r.Cycle(ctx)
		return err
	}}
}

// Cycle runs every reconciliation once; a step that fails does not stop the
// others.
func (r *Reconciler) Cycle(ctx context.Context) (Report, error) {
	var rep Report
	rows, err := r.Store.ListInstances(ctx, domain.InstanceFilter{})
	if err != nil {
		return rep, fmt.Errorf("list instances: %w", err)
	}
	var errs []error
	var listed map[string]domain.CloudInstance // nil: the cloud gave no listing
	machines, err := r.Cloud.List(ctx, domain.CloudFilter{Tags: map[string]string{domain.TagController: r.ControllerID}})
	if err != nil {
		errs = append(errs, fmt.Errorf("list machines: %w", err))
	} else {
		listed = make(map[string]domain.CloudInstance, len(machines))
		for _, m := range machines {
			listed[m.ID] = m
		}
		rep.Orphans, rep.OrphansRefused, err = r.orphans(ctx, rows, machines)
		errs = append(errs, err)
		rep.Gone, err = r.gone(ctx, rows, listed)
		errs = append(errs, err)
	}
	rep.Silent, rep.SilentKept, err = r.silent(ctx, rows, listed)
	errs = append(errs, err)
	rep.StaleClaims, err = r.staleClaims(ctx, rows)
	errs = append(errs, err)
	rejected := newRejectedCycle()
	errs = append(errs, r.lookAtScopes(ctx, rows, rejected, &rep))
	errs = append(errs, r.openJobs(ctx, rows, rejected, &rep))
	rep.Rerun, err = r.rerunInterrupted(ctx)
	errs = append(errs, err)
	// A job whose queue message is pending: sent back to its queue by a
	// change a crash interrupted, or recorded by a dead-lettered delivery.
	rep.Resent, err = jobs.SendPending(ctx, r.Store, r.Queue, r.Clock.Now(), r.Interval)
	errs = append(errs, err)
	rep.JobsDeleted, rep.RowsDeleted, err = r.retention(ctx, rows)
	errs = append(errs, err)
	r.metrics.count(rep)
	if rep.acted() {
		r.Log.Info("reconciled", "orphans", rep.Orphans, "orphans_refused", rep.OrphansRefused, "gone", rep.Gone, "silent", rep.Silent, "silent_kept", rep.SilentKept, "stale_claims", rep.StaleClaims, "dead_runners", rep.DeadRunners,
			"recovered_jobs", rep.Recovered, "requeued_jobs", rep.Requeued, "resent_jobs", rep.Resent, "rerun_jobs", rep.Rerun, "cancelled_runs", rep.Cancelled, "readmitted_jobs", rep.Readmitted,
			"completed_jobs", rep.Completed, "abandoned_jobs", rep.Abandoned, "completed_waiting_jobs", rep.CompletedWaiting,
			"abandoned_waiting_jobs", rep.AbandonedWaiting, "jobs_deleted", rep.JobsDeleted, "rows_deleted", rep.RowsDeleted)
	}
	return rep, errors.Join(errs...)
}

// openJobs asks GitHub about the jobs not over whose webhooks may have
// been lost: those whose instance ended (strandedJobs), and those waiting
// for a runner (endedWaits). One listing serves both, and they pick apart
// jobs: an assigned job is endedWaits' while its instance has not ended.
// It serves too to find the readmitted jobs whose delivery was lost, which
// rejectedJobs looks up with the rejected ones the scopes did not list.
func (r *Reconciler) openJobs(ctx context.Context, rows []domain.Instance, rejected *rejectedCycle, rep *Report) error {
	if r.GitHub == nil {
		return nil
	}
	open, err := r.Store.ListJobs(ctx, domain.JobFilter{Statuses: []domain.JobStatus{domain.JobQueued, domain.JobAssigned, domain.JobRunning}})
	if err != nil {
		return fmt.Errorf("list open jobs: %w", err)
	}
	var errs []error
	rep.Completed, rep.Abandoned, err = r.strandedJobs(ctx, rows, open)
	errs = append(errs, err)
	rep.CompletedWaiting, rep.AbandonedWaiting, err = r.endedWaits(ctx, rows, open)
	errs = append(errs, err)
	errs = append(errs, r.rejectedJobs(ctx, open, rejected, rep))
	return errors.Join(errs...)
}

// acted reports whether the cycle changed anything: looking at scopes
// alone is not worth a log line.
func (rep Report) acted() bool {
	rep.Scopes = ScopeOutcomes{}
	return rep != (Report{})
}

func (r *Reconciler) scopes(ctx context.Context) []domain.Scope {
	if r.Scopes == nil || r.GitHub == nil {
		return nil
	}
	return r.Scopes(ctx)
}

// orphans terminates machines tagged as this controller's that no live row
// knows: created behind bullpen's back, or left by a crash between a create
// call and recording its machines. It reports how many it terminated, and
// how many the cloud refused to terminate (protected from termination):
// the others of their batch are terminated all the same, and a refused
// orphan fails no cycle, since only a person can lift what protects it. It
// is set aside, logged at its first refusal and asked about again after a
// wait that doubles, as the terminator does with its rows.
func (r *Reconciler) orphans(ctx context.Context, rows []domain.Instance, machines []domain.CloudInstance) (terminated, refused int, err error) {
	live := map[string]bool{}
	for _, in := range rows {
		if in.CloudID != "" && in.State != domain.StateTerminated {
			live[in.CloudID] = true
		}
	}
	now := r.Clock.Now()
	var ids, orphaned []string
	for _, m := range machines {
		if live[m.ID] || m.State == domain.CloudTerminated || m.State == domain.CloudShuttingDown {
			continue
		}
		if now.Sub(m.LaunchedAt) < r.OrphanGrace {
			continue
		}
		orphaned = append(orphaned, m.ID)
		switch {
		case r.refusedOrphans.waiting(m.ID, now):
			continue // asked again once its wait is over
		case !r.refusedOrphans.known(m.ID):
			r.Log.Warn("terminating a machine no instance record knows", "machine", m.ID, "launch", m.Tags[domain.TagLaunch], "launched", m.LaunchedAt)
		}
		ids = append(ids, m.ID)
	}
	r.refusedOrphans.keep(orphaned)
	var errs []error
	for _, batch := range domain.Chunk(ids, domain.MaxBatch) {
		err := r.Cloud.Terminate(ctx, batch)
		left, named := domain.NotActedOn(err)
		if !named {
			errs = append(errs, fmt.Errorf("terminate %d orphans: %w", len(batch), err))
			continue
		}
		terminated += len(batch) - len(left)
		r.refusedOrphans.forget(slices.DeleteFunc(slices.Clone(batch), func(id string) bool { return slices.Contains(left, id) }))
		if refusal, ok := errors.AsType[*domain.RefusedInstancesError](err); ok {
			refused += len(refusal.IDs)
			r.setAsideOrphans(refusal, now)
		}
	}
	return terminated, refused, errors.Join(errs...)
}

// setAsideOrphans notes orphans the cloud refused to terminate: the first
// refusal of each is logged at WARN, since a person must lift what protects
// the machine; later ones at DEBUG.
func (r *Reconciler) setAsideOrphans(refusal *domain.RefusedInstancesError, now time.Time) {
	var first, again []string
	var wait time.Duration
	for _, id := range refusal.IDs {
		tries, w := r.refusedOrphans.note(id, now)
		wait = max(wait, w)
		if tries == 1 {
			first = append(first, id)
		} else {
			again = append(again, id)
		}
	}
	if len(first) > 0 {
		r.Log.Warn("the cloud refuses to terminate machines no instance record knows; asking again, less and less often, until the cause is lifted",
			"machines", first, "code", refusal.Code, "reason", refusal.Reason, "next_try_in", wait)
	}
	if len(again) > 0 {
		r.Log.Debug("the cloud still refuses to terminate machines no instance record knows", "machines", again, "code", refusal.Code,
			"reason", refusal.Reason, "next_try_in", wait)
	}
}

// gone closes rows whose machine the cloud no longer has (terminated behind
// bullpen's back, or the instance shut itself down); a job such an instance
// had not started goes back to its queue.
func (r *Reconciler) gone(ctx context.Context, rows []domain.Instance, listed map[string]domain.CloudInstance) (int, error) {
	now := r.Clock.Now()
	var errs []error
	closed := 0
	for _, in := range rows {
		m, ok := listed[in.CloudID]
		if !domain.MachineGone(in, m, ok, now, r.GoneGrace) {
			continue
		}
		if err := r.close(ctx, in, "machine gone from the cloud"); err != nil {
			errs = append(errs, err)
			continue
		}
		closed++
	}
	return closed, errors.Join(errs...)
}

// agentExpected reports whether an instance in state s runs an agent that
// heartbeats.
func agentExpected(s domain.State) bool {
	switch s {
	case domain.StateReady, domain.StateClaimed, domain.StateRunning, domain.StateReleasing:
		return true
	}
	return false
}

// close records that a row's machine no longer exists: terminating (a job
// it had not started back to its queue in the same change), then
// terminated, each guarded on the version read.
func (r *Reconciler) close(ctx context.Context, in domain.Instance, why string) error {
	cur := in
	if cur.State != domain.StateTerminating {
		next, ok, err := jobs.Retire(ctx, r.Store, r.Queue, in, domain.StateTerminating, why, in.Deadline)
		if err != nil {
			return fmt.Errorf("close %s: %w", in.ID, err)
		}
		if !ok {
			return nil // it changed meanwhile: next cycle looks again
		}
		cur = next
	}
	c := domain.Lifecycle{}.Close(cur)
	if _, err := r.Store.Transition(ctx, c.ID, c.Guard, c.Apply); err != nil && !errors.Is(err, domain.ErrConflict) {
		return fmt.Errorf("close %s: %w", in.ID, err)
	}
	return nil
}

// deadRunners deregisters bullpen's runners that GitHub lists offline and
// idle, unless an instance may still start one: a runner is offline until
// its instance's agent starts it. GitHub's errors (ghErr) are kept apart
// from the store's (err), as queuedJobs keeps them.
func (r *Reconciler) deadRunners(ctx context.Context, s domain.Scope, rows []domain.Instance) (deleted int, ghErr, err error) {
	runners, ghErr := r.GitHub.ListRunners(ctx, s)
	if ghErr != nil {
		return 0, ghErr, nil // GitHub's clients name the call and the scope
	}
	// The cycle's rows spare the runners they hold without a read; any
	// other is read again (runnerAwaited).
	held := map[string]bool{}
	for _, in := range rows {
		if in.RunnerName != "" && jobs.ServesJob(in.State) {
			held[in.RunnerName] = true
		}
	}
	var ghErrs, errs []error
	for _, rn := range runners {
		if rn.Online || rn.Busy || !strings.HasPrefix(rn.Name, r.RunnerPrefix) || held[rn.Name] {
			continue
		}
		awaited, err := r.runnerAwaited(ctx, rn.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if awaited {
			continue
		}
		err = r.GitHub.DeleteRunner(ctx, s, rn.ID)
		switch {
		case err == nil:
			deleted++
		case errors.Is(err, domain.ErrRunnerBusy), errors.Is(err, domain.ErrNotFound):
			// Busy after all (GitHub's 422), or already gone: not an error.
		default:
			ghErrs = append(ghErrs, fmt.Errorf("delete runner %s: %w", rn.Name, err))
		}
	}
	return deleted, errors.Join(ghErrs...), errors.Join(errs...)
}

// runnerAwaited reads, after GitHub listed the runners, the row of the
// instance a runner is named for (domain.RunnerName), and reports whether
// that instance may still start the runner: it holds the runner and serves
// a job, or it is bound to the runner's job, in any state short of its end;
// with no row yet, whether the runner's job, still queued, is marked
// launched on that instance (LaunchedOn). The cycle's rows cannot tell: a
// new machine's runner is registered after its job is marked and before
// its launch, its row is written (pending, bound to the job) just before
// the create call (a batch's later fleets waiting for its first ones),
// and it holds the runner only once the call returned; a claimed instance
// is bound to its job before its runner is registered.
func (r *Reconciler) runnerAwaited(ctx context.Context, name string) (bool, error) {
	id, job, ok := domain.ParseRunnerName(name)
	if !ok {
		return false, nil
	}
	in, err := r.Store.GetInstance(ctx, id)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return r.launchMarked(ctx, job, id)
	case err != nil:
		return false, fmt.Errorf("read the instance of runner %s: %w", name, err)
	}
	if in.RunnerName == name && jobs.ServesJob(in.State) {
		return true, nil
	}
	return in.Job == domain.JobKey(job) && !endingOrEnded(in.State), nil
}

// launchMarked reports whether job, still queued, is marked launched on
// instance id.
func (r *Reconciler) launchMarked(ctx context.Context, job int64, id string) (bool, error) {
	j, err := r.Store.GetJob(ctx, job)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the job of runner %s: %w", domain.RunnerName(id, job), err)
	}
	return j.Status == domain.JobQueued && j.LaunchedOn == id, nil
}

// endingOrEnded reports whether an instance in state s is on its way out:
// a runner it was given will never run.
func endingOrEnded(s domain.State) bool {
	switch s {
	case domain.StateTerminating, domain.StateTerminated, domain.StateError:
		return true
	}
	return false
}

// queuedJobs reads the jobs GitHub still has queued, so that a missed
// webhook never leaves a job waiting: an unknown one of ours is admitted
// as if its webhook had come; one bullpen assigned to an instance that no
// longer serves it goes back to its queue; a rejected one is readmitted
// or has its run cancelled (rejectedStillQueued), and a readmitted one no
// intake has routed is delivered again, each once a cycle (rejected holds
// those dealt with). It counts what it did in rep.
// GitHub's errors (ghErr) are kept apart from the store's and the queue's
// (err): the first concern the scope, the others every scope.
func (r *Reconciler) queuedJobs(ctx context.Context, s domain.Scope, rejected *rejectedCycle, rep *Report) (ghErr, err error) {
	queued, ghErr := r.GitHub.QueuedJobs(ctx, s)
	if ghErr != nil {
		return ghErr, nil // GitHub's clients name the call and the scope
	}
	var ghErrs, errs []error
	for _, gj := range queued {
		j, err := r.Store.GetJob(ctx, gj.ID)
		if err == nil {
			r.sawQueued(j.ID)
		}
		switch {
		case errors.Is(err, domain.ErrNotFound) && !r.Ours(gj.Labels):
			// Someone else's: its runner, not bullpen, serves it.
		case errors.Is(err, domain.ErrNotFound):
			if err := r.admit(ctx, gj); err != nil {
				errs = append(errs, err)
				continue
			}
			rep.Recovered++
		case err != nil:
			errs = append(errs, err)
		case j.Status == domain.JobAssigned && !r.serving(ctx, j):
			if err := jobs.Requeue(ctx, r.Store, r.Queue, j.ID, j.InstanceID, "its instance no longer serves it"); err != nil {
				errs = append(errs, err)
				continue
			}
			rep.Requeued++
		case rejected.seen[j.ID]:
			// Listed by another scope this cycle (an organisation's and
			// its repository's), and dealt with there.
		case j.Status == domain.JobRejected:
			ghErr, err := r.rejectedStillQueued(ctx, gj, j, rejected, rep)
			ghErrs, errs = append(ghErrs, ghErr), append(errs, err)
		case r.undelivered(j, r.Clock.Now()):
			rejected.seen[j.ID] = true
			errs = append(errs, r.deliverReadmitted(ctx, gj, j))
		}
	}
	return errors.Join(ghErrs...), errors.Join(errs...)
}

// serving reports whether the job's instance may still run it.
func (r *Reconciler) serving(ctx context.Context, j domain.Job) bool {
	in, err := r.Store.GetInstance(ctx, j.InstanceID)
	if err != nil {
		return !errors.Is(err, domain.ErrNotFound) // unsure: leave it
	}
	return jobs.ServesJob(in.State) && !in.Expired(r.Clock.Now())
}

// admit puts a synthetic queued delivery in the inbox, so that the intake
// routes the job as it routes every other.
func (r *Reconciler) admit(ctx context.Context, gj domain.GitHubJob) error {
	now := r.Clock.Now()
	payload := webhook.QueuedPayload(gj, now)
	r.Log.Info("queued job without a webhook; admitting it", "job", gj.ID, "repo", gj.Repo)
	return webhook.Enqueue(ctx, r.Queue, now, fmt.Sprintf("reconcile-%d", gj.ID), payload)
}

// retention deletes old final jobs and old terminated rows.
func (r *Reconciler) retention(ctx context.Context, rows []domain.Instance) (int, int, error) {
	now := r.Clock.Now()
	jobsDeleted, err := r.Store.DeleteJobs(ctx, now.Add(-r.JobRetention))
	if err != nil {
		return 0, 0, fmt.Errorf("delete old jobs: %w", err)
	}
	var old []string
	for _, in := range rows {
		if in.State == domain.StateTerminated && now.Sub(in.StateSince) >= r.InstanceRetention {
			old = append(old, in.ID)
		}
	}
	if len(old) == 0 {
		return jobsDeleted, 0, nil
	}
	if err := r.Store.DeleteInstances(ctx, old); err != nil {
		return jobsDeleted, 0, fmt.Errorf("delete old instances: %w", err)
	}
	return jobsDeleted, len(old), nil
}

type reconcileMetrics struct {
	actions *prometheus.CounterVec
	scopes  *prometheus.CounterVec
}

// Outcomes of a scope's look (bullpen_reaper_scopes_total).
const (
	scopeOK     = "ok"
	scopeFailed = "failed"
	scopeGone   = "gone"
)

func newReconcileMetrics(reg prometheus.Registerer) (*reconcileMetrics, error) {
	m := &reconcileMetrics{
		actions: promreg.Counters("bullpen_reaper_actions_total",
			"What the reaper reconciled, by kind (orphan, orphan_refused, gone, silent, silent_kept, stale_claim, dead_runner, recovered_job, requeued_job, resent_job, rerun_job, cancelled_run, readmitted_job, completed_job, abandoned_job, completed_waiting_job, abandoned_waiting_job, job_deleted, row_deleted).", "kind"),
		scopes: promreg.Counters("bullpen_reaper_scopes_total",
			"Scopes the reaper looked at on GitHub, by outcome: ok, failed (a 404 included: the credentials may have lost access), gone (GitHub answered 410).", "outcome"),
	}
	promreg.AtZero(m.scopes, scopeOK, scopeFailed, scopeGone)
	if err := promreg.Register(reg, "reaper", m.actions, m.scopes); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *reconcileMetrics) count(r Report) {
	if m == nil {
		return
	}
	for kind, n := range map[string]int{
		"orphan": r.Orphans, "orphan_refused": r.OrphansRefused, "gone": r.Gone, "silent": r.Silent, "silent_kept": r.SilentKept, "stale_claim": r.StaleClaims, "dead_runner": r.DeadRunners, "recovered_job": r.Recovered,
		"requeued_job": r.Requeued, "resent_job": r.Resent, "rerun_job": r.Rerun, "cancelled_run": r.Cancelled, "readmitted_job": r.Readmitted, "completed_job": r.Completed,
		"abandoned_job": r.Abandoned, "completed_waiting_job": r.CompletedWaiting, "abandoned_waiting_job": r.AbandonedWaiting, "job_deleted": r.JobsDeleted, "row_deleted": r.RowsDeleted,
	} {
		m.actions.WithLabelValues(kind).Add(float64(n))
	}
	for outcome, n := range map[string]int{scopeOK: r.Scopes.OK, scopeFailed: r.Scopes.Failed, scopeGone: r.Scopes.Gone} {
		m.scopes.WithLabelValues(outcome).Add(float64(n))
	}
}
