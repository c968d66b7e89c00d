// Package sim is an in-memory GitHub for developing, testing and
// demonstrating bullpen without an account. It keeps workflow jobs and
// self-hosted runners, sends workflow_job webhooks shaped like GitHub's, and
// plays the runner side too: a runner process started from a JIT config
// (RunJIT) goes online, is assigned a queued job by GitHub's label rule, runs
// it for the job's duration on the injected clock and leaves (JIT runners are
// ephemeral). Faults can be injected deterministically: failing calls, a
// rate limit until a reset time, webhooks that never arrive, runner processes
// that die. Every port call is counted by operation.
//
// Ordering of side effects. Webhook deliveries (Options.Deliver) and the
// runner callbacks of RunJIT go through one outbox and are made one at a
// time, in the order the events happened, never while the sim's lock is
// held. They are made synchronously: the goroutine whose call produced an
// event delivers it before that call returns, unless another goroutine is
// delivering already, in which case that goroutine delivers it too. So a
// Deliver or callback may call back into the sim; its own events are
// delivered after it returns. Under clock.Virtual, Settle after Advance
// waits for the deliveries of the time that passed.
package sim

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Defaults for zero JobSpec and Options fields.
const (
	DefaultRepo            = "bullpen-sim/app"
	DefaultJobName         = "build"
	DefaultWorkflow        = "CI"
	DefaultHeadBranch      = "main"
	DefaultSender          = "octocat"
	DefaultRunnerGroupID   = 1
	DefaultRunnerGroupName = "Default"
)

// RunIDExpr in a JobSpec label is replaced by the job's run id, as GitHub
// evaluates it in `runs-on: runs-on=${{ github.run_id }}/pool=NAME`.
const RunIDExpr = "${{ github.run_id }}"

// Job statuses and conclusions as GitHub spells them.
const (
	StatusQueued     = "queued"
	StatusWaiting    = "waiting" // held for an environment's approval
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"

	ConclusionSuccess   = "success"
	ConclusionFailure   = "failure"
	ConclusionCancelled = "cancelled"
)

// Options configure a GitHub. The zero value is a usable GitHub that sends
// no webhooks.
type Options struct {
	// Deliver receives every workflow_job webhook: the event name
	// ("workflow_job"), a unique delivery id (X-GitHub-Delivery) and the
	// JSON body. See the package comment for when it is called. Nil
	// delivers nothing.
	Deliver func(event, deliveryID string, payload []byte)
	// OfflineAfter is how long GitHub takes to notice that a runner process
	// has died (its RunJIT context ended): until then the runner is listed
	// online (and busy, with its job in progress); then it is listed
	// offline and not busy, and its job fails. Zero notices at once.
	OfflineAfter time.Duration
	// Seed makes delivery ids, commit shas and the like reproducible.
	Seed uint64
	// Sender is the login webhooks name as sender; DefaultSender when empty.
	Sender string
	// Enterprise is the enterprise every simulated organisation belongs
	// to: runners registered there serve any repository's jobs. Empty: an
	// enterprise scope is not found.
	Enterprise string
}

// JobSpec describes a job to queue. Zero fields take the defaults above.
type JobSpec struct {
	Repo     string // owner/name
	Name     string
	Workflow string
	// Labels are the job's runs-on labels; RunIDExpr in them becomes the
	// run id.
	Labels []string
	// RunID adds the job to that run (created if new); 0 starts a new run.
	RunID int64
	// Duration is how long the job runs once a runner has it.
	Duration time.Duration
	// Conclusion is how the job ends when it runs to completion;
	// ConclusionSuccess when empty.
	Conclusion string
	// AwaitApproval holds the job for its environment's reviewers: it is
	// waiting, and no runner may take it, until Approve. Its webhooks are
	// GitHub's: queued and waiting with status waiting, then queued with
	// status queued once approved.
	AwaitApproval bool
}

// JobRecord is a job with the times GitHub knows, for reports.
type JobRecord struct {
	domain.GitHubJob
	Duration    time.Duration // how long it runs once a runner has it
	RunnerID    int64
	StartedAt   time.Time // zero until a runner took it
	CompletedAt time.Time // zero until it completed
}

// GitHub is the simulated GitHub. It is safe for concurrent use.
type GitHub struct {
	clk  domain.Clock
	opts Options

	mu       sync.Mutex
	rng      *rand.Rand
	jobs     map[int64]*job
	queue    []*job // queued jobs, oldest first
	runs     map[int64]*run
	runners  map[int64]*runner
	jit      map[string]*runner
	idle     []*runner // online, alive, without a job: in the order they came online
	accounts map[string]int64
	repos    map[string]int64
	lastJob  int64
	lastRun  int64
	lastRnr  int64
	lastAcct int64

	outbox   []func()
	draining bool

	faults
}

var _ domain.GitHub = (*GitHub)(nil)

type job struct {
	domain.GitHubJob
	headBranch  string
	runner      *runner
	runnerID    int64
	startedAt   time.Time
	completedAt time.Time
	duration    time.Duration
	outcome     string // the conclusion when it runs to the end
	gated       bool   // its environment needs an approval, each attempt
	timer       domain.Timer
}

type run struct {
	repo    string
	headSHA string
	jobs    []*job
}

// New returns an empty GitHub on clk.
func New(clk domain.Clock, opts Options) *GitHub {
	if opts.Sender == "" {
		opts.Sender = DefaultSender
	}
	return &GitHub{
		clk:      clk,
		opts:     opts,
		rng:      rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x6a09e667f3bcc908)),
		jobs:     map[int64]*job{},
		runs:     map[int64]*run{},
		runners:  map[int64]*runner{},
		jit:      map[string]*runner{},
		accounts: map[string]int64{},
		repos:    map[string]int64{},
		// Ids grow with the clock, not from a fixed number: a simulated
		// GitHub started again on a store that kept the last one's jobs
		// would hand out their ids again, and the intake would take each
		// new job for a redelivery of an old one.
		lastJob:  30_000_000_000 + clk.Now().UnixMilli(),
		lastRun:  10_000_000_000 + clk.Now().UnixMilli(),
		lastAcct: 9_000_000,
		faults:   newFaults(),
	}
}

// QueueJob creates a queued job, sends its queued webhook and hands it to a
// waiting runner whose labels cover it, if any. It returns the job as it was
// queued. A job that awaits an approval is created waiting instead (see
// JobSpec.AwaitApproval).
func (g *GitHub) QueueJob(spec JobSpec) domain.GitHubJob {
	j := g.queueAt(spec, time.Time{})
	g.flush()
	return j
}

// queueAt queues a job created at at (now when zero) without flushing the
// outbox, so the generator can queue in order under its own lock.
func (g *GitHub) queueAt(spec JobSpec, at time.Time) domain.GitHubJob {
	g.mu.Lock()
	defer g.mu.Unlock()
	if at.IsZero() {
		at = g.clk.Now()
	}
	j := g.newJob(spec, at)
	out := j.public()
	g.announce(j)
	return out
}

// announce sends the webhooks of a job just created and, unless it awaits
// an approval, hands it to a waiting runner. Called under g.mu.
func (g *GitHub) announce(j *job) {
	g.emit("queued", j)
	if j.Status == StatusWaiting {
		g.emit("waiting", j)
		return
	}
	if r := g.idleRunnerFor(j); r != nil {
		g.start(j, r)
	}
}

// Approve approves a job held for its environment's reviewers: it is
// queued, its queued webhook sent, and a waiting runner whose labels cover
// it takes it. domain.ErrNotFound when no job id waits for an approval.
func (g *GitHub) Approve(id int64) error {
	return g.apply(func() error {
		j := g.jobs[id]
		if j == nil || j.Status != StatusWaiting {
			return fmt.Errorf("approve job %d: %w: no such job waiting for an approval", id, domain.ErrNotFound)
		}
		j.Status = StatusQueued
		g.queue = append(g.queue, j)
		g.emit("queued", j)
		if r := g.idleRunnerFor(j); r != nil {
			g.start(j, r)
		}
		return nil
	})
}

// newJob records a queued job. Called under g.mu.
func (g *GitHub) newJob(spec JobSpec, at time.Time) *job {
	spec = withDefaults(spec)
	ru := g.runFor(&spec)
	g.lastJob++
	labels := make([]string, len(spec.Labels))
	for i, l := range spec.Labels {
		labels[i] = strings.ReplaceAll(l, RunIDExpr, fmt.Sprint(spec.RunID))
	}
	j := &job{
		GitHubJob: domain.GitHubJob{
			ID: g.lastJob, RunID: spec.RunID, RunAttempt: 1, Repo: ru.repo,
			Name: spec.Name, Workflow: spec.Workflow, Status: StatusQueued,
			Labels: labels, CreatedAt: at,
		},
		headBranch: DefaultHeadBranch,
		duration:   max(spec.Duration, 0),
		outcome:    spec.Conclusion,
		gated:      spec.AwaitApproval,
	}
	ru.jobs = append(ru.jobs, j)
	g.jobs[j.ID] = j
	if j.gated {
		j.Status = StatusWaiting
		return j
	}
	g.queue = append(g.queue, j)
	return j
}

func withDefaults(s JobSpec) JobSpec {
	if s.Repo == "" {
		s.Repo = DefaultRepo
	}
	if s.Name == "" {
		s.Name = DefaultJobName
	}
	if s.Workflow == "" {
		s.Workflow = DefaultWorkflow
	}
	if s.Conclusion == "" {
		s.Conclusion = ConclusionSuccess
	}
	return s
}

// runFor returns the run the spec names, creating it, and sets spec.RunID
// when it asks for a new one. Called under g.mu.
func (g *GitHub) runFor(spec *JobSpec) *run {
	if ru := g.runs[spec.RunID]; ru != nil && spec.RunID != 0 {
		if !strings.EqualFold(ru.repo, spec.Repo) {
			panic(fmt.Sprintf("sim: run %d belongs to %s, not %s", spec.RunID, ru.repo, spec.Repo))
		}
		return ru
	}
	if spec.RunID == 0 {
		g.lastRun++
		spec.RunID = g.lastRun
	}
	g.lastRun = max(g.lastRun, spec.RunID)
	ru := &run{repo: spec.Repo, headSHA: fmt.Sprintf("%016x%016x%08x", g.rng.Uint64(), g.rng.Uint64(), g.rng.Uint32())}
	g.runs[spec.RunID] = ru
	return ru
}

func (j *job) public() domain.GitHubJob {
	out := j.GitHubJob
	out.Labels = slices.Clone(j.Labels)
	return out
}

func (j *job) record() JobRecord {
	return JobRecord{GitHubJob: j.public(), Duration: j.duration, RunnerID: j.runnerID, StartedAt: j.startedAt, CompletedAt: j.completedAt}
}

// GetJob returns the job; domain.ErrNotFound when repo has no job id.
func (g *GitHub) GetJob(ctx context.Context, repo string, id int64) (domain.GitHubJob, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.call(ctx, OpGetJob); err != nil {
		return domain.GitHubJob{}, fmt.Errorf("get job %d: %w", id, err)
	}
	j := g.jobs[id]
	if j == nil || !strings.EqualFold(j.Repo, repo) {
		return domain.GitHubJob{}, fmt.Errorf("get job %d in %s: %w", id, repo, domain.ErrNotFound)
	}
	return j.public(), nil
}

// QueuedJobs lists the scope's queued jobs, oldest first: a repository's, or
// for an organisation those of all its repositories.
func (g *GitHub) QueuedJobs(ctx context.Context, s domain.Scope) ([]domain.GitHubJob, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.call(ctx, OpQueuedJobs); err != nil {
		return nil, fmt.Errorf("queued jobs of %s: %w", s, err)
	}
	if s.Owner == "" {
		return nil, fmt.Errorf("queued jobs of %s: %w: GitHub lists jobs of an organisation or a repository only", s, domain.ErrInvalidRequest)
	}
	var out []domain.GitHubJob
	for _, j := range g.queue {
		if covers(s, j.Repo) {
			out = append(out, j.public())
		}
	}
	return out, nil
}

// CancelRun cancels every job of the run that has not completed: queued,
// waiting and in-progress jobs complete as cancelled, and runners running
// them finish.
// A run with nothing left to cancel is not an error.
func (g *GitHub) CancelRun(ctx context.Context, repo string, runID int64) error {
	return g.apply(func() error { return g.cancelRun(ctx, repo, runID) })
}

func (g *GitHub) cancelRun(ctx context.Context, repo string, runID int64) error {
	if err := g.call(ctx, OpCancelRun); err != nil {
		return fmt.Errorf("cancel run %d: %w", runID, err)
	}
	ru := g.runs[runID]
	if ru == nil || !strings.EqualFold(ru.repo, repo) {
		return fmt.Errorf("cancel run %d in %s: %w", runID, repo, domain.ErrNotFound)
	}
	now := g.clk.Now()
	for _, j := range ru.jobs {
		switch j.Status {
		case StatusQueued, StatusWaiting:
			g.complete(j, ConclusionCancelled, now)
		case StatusInProgress:
			r := j.runner
			g.complete(j, ConclusionCancelled, now)
			g.release(r, j.ID, ConclusionCancelled)
		}
	}
	return nil
}

// RerunJob queues a completed job again, as a new attempt of its run;
// domain.ErrRunInProgress while its run has a job not completed.
func (g *GitHub) RerunJob(ctx context.Context, repo string, jobID int64) error {
	return g.apply(func() error { return g.rerun(ctx, repo, jobID) })
}

func (g *GitHub) rerun(ctx context.Context, repo string, jobID int64) error {
	if err := g.call(ctx, OpRerunJob); err != nil {
		return fmt.Errorf("re-run job %d: %w", jobID, err)
	}
	old := g.jobs[jobID]
	if old == nil || !strings.EqualFold(old.Repo, repo) {
		return fmt.Errorf("re-run job %d in %s: %w", jobID, repo, domain.ErrNotFound)
	}
	for _, j := range g.runs[old.RunID].jobs {
		if j.Status != StatusCompleted {
			return fmt.Errorf("re-run job %d in %s: %w", jobID, repo, domain.ErrRunInProgress)
		}
	}
	j := g.newJob(JobSpec{Repo: old.Repo, Name: old.Name, Workflow: old.Workflow, Labels: old.Labels, RunID: old.RunID,
		Duration: old.duration, Conclusion: old.outcome, AwaitApproval: old.gated}, g.clk.Now())
	j.RunAttempt = old.RunAttempt + 1
	g.announce(j)
	return nil
}

// Jobs returns every job the sim has seen, in the order they were queued.
func (g *GitHub) Jobs() []JobRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]JobRecord, 0, len(g.jobs))
	for _, j := range g.jobs {
		out = append(out, j.record())
	}
	slices.SortFunc(out, func(a, b JobRecord) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Job returns one job's record.
func (g *GitHub) Job(id int64) (JobRecord, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	j := g.jobs[id]
	if j == nil {
		return JobRecord{}, false
	}
	return j.record(), true
}

// complete ends j with conclusion at at and sends the completed webhook.
// The caller deals with j's runner. Called under g.mu.
func (g *GitHub) complete(j *job, conclusion string, at time.Time) {
	if j.Status == StatusQueued {
		g.queue = slices.DeleteFunc(g.queue, func(q *job) bool { return q == j })
	}
	if j.timer != nil {
		j.timer.Stop()
		j.timer = nil
	}
	j.Status = StatusCompleted
	j.Conclusion = conclusion
	j.completedAt = at
	j.runner = nil
	g.emit("completed", j)
}

// covers reports whether a runner registered at s may serve repo's jobs.
func covers(s domain.Scope, repo string) bool {
	if s.Owner == "" && s.Enterprise != "" {
		return true // every simulated organisation is in the enterprise
	}
	owner, name, _ := strings.Cut(repo, "/")
	return strings.EqualFold(owner, s.Owner) && (s.Repo == "" || strings.EqualFold(name, s.Repo))
}

// enqueue adds a side effect to the outbox. Called under g.mu.
func (g *GitHub) enqueue(f func()) { g.outbox = append(g.outbox, f) }

// apply makes a change under g.mu, then the side effects it put in the
// outbox, outside the lock.
func (g *GitHub) apply(change func() error) error {
	g.mu.Lock()
	err := change()
	g.mu.Unlock()
	g.flush()
	return err
}

// flush makes the outbox's side effects in order, outside the lock, unless
// another goroutine is already doing so.
func (g *GitHub) flush() {
	g.mu.Lock()
	if g.draining {
		g.mu.Unlock()
		return
	}
	g.draining = true
	for len(g.outbox) > 0 {
		f := g.outbox[0]
		g.outbox[0] = nil
		g.outbox = g.outbox[1:]
		g.mu.Unlock()
		f()
		g.mu.Lock()
	}
	g.draining = false
	g.mu.Unlock()
}
