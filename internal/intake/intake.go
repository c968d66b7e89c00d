package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// ReasonWaiting marks a job GitHub holds for an approval (see
// heldForApproval): recorded, not yet sent to be served.
const ReasonWaiting = domain.ReasonWaitingForApproval

// statusWaiting is workflow_job.status for a job held for an approval.
const statusWaiting = "waiting"

// DeadLetterQueue keeps inbox messages that failed too often, so nothing
// accepted is ever silently dropped.
const DeadLetterQueue = "inbox-dead"

// Finisher releases a job's instance when the job ends (agents.Service).
type Finisher interface {
	Finish(ctx context.Context, jobID int64, conclusion string) error
}

// Options tune the intake; zero values take the defaults.
type Options struct {
	BatchMax    int           // default 200
	Visibility  time.Duration // default 30 s
	Wait        time.Duration // long poll; default 1 s, negative none
	MaxReceives int           // then dead-lettered; default 10
	Linger      time.Duration // see jobs.BatchOptions; default 10 ms, negative none
	// AccountCheckTimeout bounds the look-ups of a batch that ask GitHub
	// whether the App is installed for its jobs' owners; default 5 s. An
	// owner not answered by then is taken as served.
	AccountCheckTimeout time.Duration
}

// accountChecks is how many owners' look-ups a batch makes at a time.
const accountChecks = 8

// UnknownEnvironmentWarnEvery is how often the intake warns, per
// environment name, of jobs naming an environment no pool names.
const UnknownEnvironmentWarnEvery = 10 * time.Minute

// Deps are the intake's collaborators.
type Deps struct {
	Store    Store
	Queue    domain.Queue
	Clock    domain.Clock
	Log      *slog.Logger
	Routing  func() Routing
	Finisher Finisher
	GitHub   domain.GitHub // to check accounts (AccountChecker); may be nil
	// Hold keeps the deliveries in hand invisible until the returned stop
	// is called (keepalive.Hold): a batch that outlasts the visibility
	// timeout would otherwise be taken again by another replica and its
	// jobs sent to their queues twice. Nil: not held.
	Hold func(queue string, receipts []string, visibility time.Duration) (stop func())
}

// Intake consumes the inbox.
type Intake struct {
	Deps
	opts    Options
	metrics *metrics

	mu sync.Mutex
	// envWarned is when each unknown environment (lower case) was last
	// warned of.
	envWarned map[string]time.Time
}

// New returns an intake; reg may be nil.
func New(d Deps, reg prometheus.Registerer, o Options) (*Intake, error) {
	if o.BatchMax <= 0 {
		o.BatchMax = 200
	}
	if o.Visibility <= 0 {
		o.Visibility = 30 * time.Second
	}
	if o.Wait == 0 {
		o.Wait = time.Second
	}
	if o.MaxReceives <= 0 {
		o.MaxReceives = 10
	}
	if o.Linger == 0 {
		o.Linger = 10 * time.Millisecond
	}
	if o.AccountCheckTimeout <= 0 {
		o.AccountCheckTimeout = 5 * time.Second
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Intake{Deps: d, opts: o, metrics: m, envWarned: map[string]time.Time{}}, nil
}

// Loop consumes the inbox, a batch a step (each long-polls the queue and
// finishes the batch in hand).
func (in *Intake) Loop() loop.Loop {
	return loop.Loop{Name: "intake", Step: func(ctx context.Context) error {
		_, err := in.Step(ctx)
		return err
	}}
}

// event is one decoded delivery of a batch, with where its labels route it.
type event struct {
	msg      domain.Message
	delivery webhook.Delivery
	ev       webhook.WorkflowJobEvent
	decision Decision
}

// batch is what a Step learns once for all the deliveries it holds.
type batch struct {
	// unservable is why the jobs of an owner (lower case) cannot be
	// served; an owner is absent when they can, or GitHub did not say.
	unservable map[string]string
}

// Step processes one batch: new jobs first (one store write for all of
// them, one send per queue), then starts and ends in delivery order.
func (in *Intake) Step(ctx context.Context) (int, error) {
	msgs, err := jobs.ReceiveBatch(ctx, in.Queue, in.Clock, domain.QueueInbox, jobs.BatchOptions{
		Max: in.opts.BatchMax, Visibility: in.opts.Visibility, Wait: in.opts.Wait, Linger: in.opts.Linger})
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	ctx = context.WithoutCancel(ctx)
	if in.Hold != nil {
		defer in.Hold(domain.QueueInbox, jobs.Receipts(msgs), in.opts.Visibility)()
	}
	events, done := in.decode(ctx, msgs)
	routing := in.Routing()
	var arrivals, progress []event
	for _, e := range events {
		e.decision = Decide(e.ev.Job.Labels, routing)
		if isArrival(e) {
			in.warnUnknownEnvironment(e)
			arrivals = append(arrivals, e)
		} else {
			progress = append(progress, e)
		}
	}
	b := &batch{unservable: in.checkAccounts(ctx, arrivals)}
	handled, unrecorded, err := in.admitAll(ctx, b, arrivals)
	done = append(done, handled...)
	for _, e := range progress {
		if unrecorded[e.ev.Job.ID] {
			// Its queued event failed and will come again: applying the
			// start or end first would let that queued event reopen it.
			continue
		}
		if herr := in.progress(ctx, e); herr != nil {
			err = errors.Join(err, herr)
			done = append(done, in.retryOrDeadLetter(ctx, e, herr)...)
			continue
		}
		done = append(done, e.msg.Receipt)
	}
	if derr := in.Queue.Delete(ctx, domain.QueueInbox, done); derr != nil {
		err = errors.Join(err, fmt.Errorf("delete processed deliveries: %w", derr))
	}
	return len(msgs), err
}

func isArrival(e event) bool {
	return e.ev.Action == webhook.ActionQueued || e.ev.Action == webhook.ActionWaiting
}

// heldForApproval reports whether an arrival is of a job GitHub holds for
// an environment's approval. GitHub says so twice, queued with the job's
// status waiting and then waiting; once the job is approved, it sends
// queued again with status queued, the one arrival that releases it.
func heldForApproval(ev webhook.WorkflowJobEvent) bool {
	return ev.Action == webhook.ActionWaiting || ev.Job.Status == statusWaiting
}

// decode reads the batch's envelopes. It returns the events to apply and
// the receipts of messages already dealt with: unhandled actions, and
// messages moved to the dead-letter queue.
func (in *Intake) decode(ctx context.Context, msgs []domain.Message) ([]event, []string) {
	var events []event
	var done []string
	for _, m := range msgs {
		d, err := webhook.DecodeDelivery(m.Body)
		var ev webhook.WorkflowJobEvent
		if err == nil {
			ev, err = webhook.ParseWorkflowJob(d.Payload)
		}
		if err != nil {
			if errors.Is(err, webhook.ErrUnhandledAction) {
				done = append(done, m.Receipt)
				continue
			}
			// The handler refused what does not parse, so this is a bug or
			// a corrupted message: keep it, in the dead-letter queue.
			done = append(done, in.deadLetter(ctx, m, "inbox message does not parse", "err", err)...)
			continue
		}
		events = append(events, event{msg: m, delivery: d, ev: ev})
	}
	return events, done
}

// admitAll records the arrivals in one batch. When that fails it tries them
// one by one, so that a delivery the store refuses holds back only itself.
// It returns the receipts to delete and the jobs whose arrival failed.
func (in *Intake) admitAll(ctx context.Context, b *batch, arrivals []event) ([]string, map[int64]bool, error) {
	done, err := in.admit(ctx, b, arrivals)
	if err == nil {
		return done, nil, nil
	}
	if len(arrivals) == 1 {
		e := arrivals[0]
		return in.retryOrDeadLetter(ctx, e, err), map[int64]bool{e.ev.Job.ID: true}, err
	}
	in.Log.Warn("recording a batch of jobs failed; trying them one by one", "jobs", len(arrivals), "err", err)
	var errs error
	done = nil
	failed := map[int64]bool{}
	for _, e := range arrivals {
		one, err := in.admit(ctx, b, []event{e})
		if err != nil {
			errs = errors.Join(errs, err)
			failed[e.ev.Job.ID] = true
			one = in.retryOrDeadLetter(ctx, e, err)
		}
		done = append(done, one...)
	}
	return done, failed, errs
}

// retryOrDeadLetter leaves a failed delivery for another try (no receipt to
// delete) until it has been received MaxReceives times, then moves it to
// the dead-letter queue. An arrival first leaves its job to the reaper
// (handOff); until that is written the delivery is kept for another try.
func (in *Intake) retryOrDeadLetter(ctx context.Context, e event, err error) []string {
	if e.msg.Receives < in.opts.MaxReceives {
		return nil
	}
	attrs := []any{"delivery", e.delivery.ID, "job", e.ev.Job.ID, "err", err}
	if isArrival(e) {
		sendPending, herr := in.handOff(ctx, e)
		if herr != nil {
			in.Log.Warn("inbox message keeps failing; its job could not be left to the reaper, kept in the inbox for another try",
				append(attrs, "hand_off_err", herr)...)
			return nil
		}
		attrs = append(attrs, "job_send_pending", sendPending)
	}
	return in.deadLetter(ctx, e.msg, "inbox message keeps failing", attrs...)
}

// handOff makes sure the job of an arrival about to be dead-lettered is
// served without it. A job the store does not know is admitted by the
// reaper from GitHub's queued jobs; a recorded one waiting for a runner
// has no other message coming (the failure may have been its send, or
// anything after it was recorded), so it is marked SendPending, as a
// requeued job is, and the reaper's sweep sends it. A queued delivery of a
// job no longer held for an approval also releases a job recorded waiting
// for one, as its redelivery would have. It reports whether it marked the
// job.
func (in *Intake) handOff(ctx context.Context, e event) (bool, error) {
	j, err := in.Store.GetJob(ctx, e.ev.Job.ID)
	if errors.Is(err, domain.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read job %d: %w", e.ev.Job.ID, err)
	}
	release := !heldForApproval(e.ev) && j.Reason == ReasonWaiting
	if j.Status != domain.JobQueued || j.InstanceID != "" || j.SendPending || (j.Reason == ReasonWaiting && !release) {
		return false, nil // served, over, or still waiting for its approval
	}
	if j.Unrouted() {
		// Readmitted, and no queue is its yet: the reaper puts another
		// delivery of it in the inbox.
		return false, nil
	}
	_, err = in.Store.TransitionJob(ctx, j.ID, domain.JobGuardOf(j), func(x *domain.Job) {
		if release {
			x.Reason = ""
		}
		x.SendPending = true
	})
	if err != nil {
		return false, fmt.Errorf("mark job %d's message pending: %w", j.ID, err)
	}
	in.metrics.events.WithLabelValues(e.ev.Action, "send_pending").Inc()
	return true, nil
}

// deadLetter moves a message aside, saying why at ERROR: a dead letter
// needs a human. It returns the receipt to delete when the move worked.
// When it did not, nothing is lost: the message stays in the inbox and its
// next receive tries the move again, so that is a WARN.
func (in *Intake) deadLetter(ctx context.Context, m domain.Message, why string, attrs ...any) []string {
	attrs = append([]any{"message", m.ID}, attrs...)
	if err := in.Queue.Send(ctx, DeadLetterQueue, []domain.SendRequest{{Body: m.Body}}); err != nil {
		in.Log.Warn(why+"; the dead-letter queue refused it, kept in the inbox for another try",
			append(attrs, "dead_letter_err", err)...)
		return nil
	}
	in.metrics.deadLettered.Inc()
	in.Log.Error(why+"; dead-lettered", attrs...)
	return []string{m.Receipt}
}

// AccountChecker is a GitHub that can tell up front that it cannot act for
// an account (a GitHub App not installed there, or suspended).
type AccountChecker interface {
	CheckAccount(ctx context.Context, owner string) error
}

// checkAccounts asks GitHub whether the App can act for the owners of the
// arrivals that are ours and not rejected already, once per owner, and
// returns why it cannot, by owner (see batch.unservable). The look-ups run
// side by side, all within AccountCheckTimeout: one that fails or has not
// answered by then (GitHub unreachable) says nothing, and its jobs go on.
func (in *Intake) checkAccounts(ctx context.Context, arrivals []event) map[string]string {
	checker, ok := in.GitHub.(AccountChecker)
	if !ok {
		return nil
	}
	var owners []string
	seen := map[string]bool{}
	for _, e := range arrivals {
		if !e.decision.Ours || e.decision.Reject != "" {
			continue
		}
		owner := ownerOf(e.ev.Repo)
		if key := strings.ToLower(owner); !seen[key] {
			seen[key] = true
			owners = append(owners, owner)
		}
	}
	if len(owners) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer in.Clock.AfterFunc(in.opts.AccountCheckTimeout, cancel).Stop()
	reasons := make([]string, len(owners))
	clock.Fan(in.Clock, len(owners), accountChecks, func(i int) {
		if err := checker.CheckAccount(ctx, owners[i]); err != nil && errors.Is(err, domain.ErrUnauthorized) {
			reasons[i] = err.Error()
		}
	})
	out := map[string]string{}
	for i, owner := range owners {
		if reasons[i] != "" {
			out[strings.ToLower(owner)] = reasons[i]
		}
	}
	return out
}

func ownerOf(repo string) string {
	owner, _, _ := strings.Cut(repo, "/")
	return owner
}

// admit records the batch's queued and waiting jobs (events holds only
// those) and sends the queued ones to their queues. Redeliveries find their
// job already recorded; a job still waiting for a runner is sent again,
// harmlessly (the send is deduplicated, and the job's one guarded
// assignment decides).
func (in *Intake) admit(ctx context.Context, b *batch, events []event) ([]string, error) {
	batch, receipts := in.jobsOf(b, events)
	if len(batch) == 0 {
		return receipts, nil
	}
	created, err := in.Store.CreateJobs(ctx, batch)
	// A job is seen created only by the call that created it: a retry finds
	// it recorded. So every job created here is announced (rejected,
	// counted) before anything else can fail, even when the write failed
	// part-way: a store that writes job by job (DynamoDB) then reports
	// which jobs it did create.
	if len(created) == len(batch) {
		for i, j := range batch {
			if created[i] {
				in.announce(j)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("record %d jobs: %w", len(batch), err)
	}
	if len(created) != len(batch) {
		return nil, fmt.Errorf("record %d jobs: the store reported %d", len(batch), len(created))
	}
	recorded := slices.Clone(batch)
	for i, j := range batch {
		if !created[i] {
			if recorded[i], err = in.redelivered(ctx, j); err != nil {
				return nil, err
			}
		}
	}
	sends := map[string][]domain.SendRequest{}
	for _, j := range recorded {
		if waitsForRunner(j) {
			q := jobs.QueueFor(j.Route)
			sends[q] = append(sends[q], jobs.SendRequest(j, 0))
		}
	}
	for q, reqs := range sends {
		if err := in.Queue.Send(ctx, q, reqs); err != nil {
			return nil, fmt.Errorf("send %d jobs to the %s queue: %w", len(reqs), q, err)
		}
	}
	return receipts, nil
}

// jobsOf is the jobs of the events whose labels are ours, routed (rejected
// when no runner can ever serve them), and every event's receipt.
func (in *Intake) jobsOf(b *batch, events []event) ([]domain.Job, []string) {
	var batch []domain.Job
	var receipts []string
	for _, e := range events {
		receipts = append(receipts, e.msg.Receipt)
		d := e.decision
		if !d.Ours {
			in.metrics.events.WithLabelValues(e.ev.Action, "not_ours").Inc()
			continue
		}
		if d.Reject == "" {
			d.Reject = b.unservable[strings.ToLower(ownerOf(e.ev.Repo))]
		}
		j := newJob(e, d, in.Clock.Now())
		batch = append(batch, j)
	}
	return batch, receipts
}

// redelivered is the recorded job a redelivery of j found, released from
// waiting when j says the job is queued now, no longer held. A job
// readmitted after a rejection, recorded with no route, is routed as j is.
func (in *Intake) redelivered(ctx context.Context, j domain.Job) (domain.Job, error) {
	cur, err := in.Store.GetJob(ctx, j.ID)
	if err != nil {
		return domain.Job{}, fmt.Errorf("read job %d: %w", j.ID, err)
	}
	if cur.Unrouted() && cur.InstanceID == "" {
		return in.route(ctx, cur, j)
	}
	if j.Reason != ReasonWaiting && cur.Reason == ReasonWaiting && cur.Status == domain.JobQueued {
		ok := domain.Lifecycle{}.Approve(cur)
		cur, err = in.Store.TransitionJob(ctx, cur.ID, ok.Guard, ok.Apply)
		if err != nil {
			return domain.Job{}, fmt.Errorf("release job %d from waiting: %w", j.ID, err)
		}
	}
	in.metrics.events.WithLabelValues("queued", "duplicate").Inc()
	return cur, nil
}

// route gives a job readmitted after a rejection (recorded queued, with
// no route) the route its labels take under the configuration in force,
// as arrived has it, and announces it as a new arrival: sent to its queue,
// or rejected again when the configuration still does not serve it (a
// reload undone, or not yet made by this replica). A job another intake
// routed meanwhile fails the delivery, whose next try finds it routed.
func (in *Intake) route(ctx context.Context, cur, arrived domain.Job) (domain.Job, error) {
	verbs := domain.Lifecycle{}
	r := verbs.RouteJob(cur, arrived.Route, arrived.Pool, arrived.Runner, arrived.Spec)
	if arrived.Status == domain.JobRejected {
		r = verbs.RejectJob(cur, arrived.Reason)
	}
	next, err := in.Store.TransitionJob(ctx, r.ID, r.Guard, r.Apply)
	if err != nil {
		return domain.Job{}, fmt.Errorf("route readmitted job %d: %w", cur.ID, err)
	}
	in.announce(next)
	return next, nil
}

// announce acts once on a job just created or readmitted and routed: a
// rejected one is rejected, a queued or waiting one counted.
func (in *Intake) announce(j domain.Job) {
	switch {
	case j.Status == domain.JobRejected:
		in.reject(j)
	case j.Reason == ReasonWaiting:
		in.metrics.events.WithLabelValues("waiting", "recorded").Inc()
	default:
		in.metrics.events.WithLabelValues("queued", string(j.Route)).Inc()
	}
}

// waitsForRunner reports whether a recorded job is to be sent to its
// queue: queued, with no instance, and not waiting for an approval.
func waitsForRunner(j domain.Job) bool {
	return j.Status == domain.JobQueued && j.InstanceID == "" && j.Reason != ReasonWaiting
}

func newJob(e event, d Decision, now time.Time) domain.Job {
	w := e.ev.Job
	j := domain.Job{
		ID: w.ID, RunID: w.RunID, RunAttempt: w.RunAttempt, Repo: e.ev.Repo, Name: w.Name, Workflow: w.WorkflowName,
		Labels: w.Labels, Status: domain.JobQueued, Route: d.Route, Pool: d.Pool, Runner: d.Runner, Spec: d.Spec,
		QueuedAt: w.CreatedAt,
	}
	if j.QueuedAt.IsZero() {
		j.QueuedAt = e.delivery.ReceivedAt
	}
	if j.QueuedAt.IsZero() {
		j.QueuedAt = now
	}
	if d.Reject != "" {
		j.Status, j.Reason = domain.JobRejected, d.Reject
	} else if heldForApproval(e.ev) {
		j.Reason = ReasonWaiting
	}
	return j
}

// reject tells the operator (log, metric). A readmitted job rejected
// again is counted apart (rejected_again): it was counted when first
// rejected, and the alert on rejections counts jobs, not readmissions.
func (in *Intake) reject(j domain.Job) {
	if j.Readmissions > 0 {
		in.metrics.events.WithLabelValues("queued", "rejected_again").Inc()
		in.Log.Warn("job rejected again after its readmission", "job", j.ID, "repo", j.Repo, "run", j.RunID, "reason", j.Reason,
			"readmissions", j.Readmissions)
		return
	}
	in.metrics.events.WithLabelValues("queued", "rejected").Inc()
	in.Log.Warn("job rejected", "job", j.ID, "repo", j.Repo, "run", j.RunID, "reason", j.Reason)
}

// warnUnknownEnvironment warns of an arrival whose labels are bullpen's but
// name an environment no pool of the configuration names: no stack reading
// the file may serve it, and it waits until GitHub drops it. Once per
// environment name every UnknownEnvironmentWarnEvery: a run of such jobs
// is one mistake, said once.
func (in *Intake) warnUnknownEnvironment(e event) {
	env := e.decision.UnknownEnvironment
	if env == "" {
		return
	}
	now, key := in.Clock.Now(), strings.ToLower(env)
	in.mu.Lock()
	last, warned := in.envWarned[key]
	due := !warned || now.Sub(last) >= UnknownEnvironmentWarnEvery
	if due {
		for k, at := range in.envWarned {
			if now.Sub(at) >= UnknownEnvironmentWarnEvery {
				delete(in.envWarned, k)
			}
		}
		in.envWarned[key] = now
	}
	in.mu.Unlock()
	if due {
		in.Log.Warn("job names an environment no pool of the configuration names; no stack may serve it (a typo in env=?)",
			"job", e.ev.Job.ID, "repo", e.ev.Repo, "env", env, "labels", e.ev.Job.Labels)
	}
}
