package sim

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Errors of the runner side (RunJIT).
var (
	// ErrInvalidJITConfig: no runner has this config (never issued, or its
	// runner was deleted).
	ErrInvalidJITConfig = errors.New("invalid JIT config")
	// ErrJITConfigUsed: a JIT config starts one runner process, once.
	ErrJITConfigUsed = errors.New("JIT config already used")
)

// runner is a self-hosted runner registered just in time. It is listed from
// registration until it finishes its one job, or until it is deleted.
type runner struct {
	id     int64
	name   string
	labels []string
	scope  domain.Scope
	jit    string

	started bool // its JIT config has been used
	online  bool
	dead    bool // its process has gone (context ended)
	job     *job
	onStart func(jobID int64)
	onDone  func(jobID int64, conclusion string)
	unwatch func()       // stops watching the process's context
	lost    domain.Timer // pending OfflineAfter notice
}

// RegisterRunner registers a just-in-time runner. It is offline until a
// process runs its JIT config (RunJIT). A name already used in the scope is
// refused with domain.ErrExists, as GitHub answers 409.
func (g *GitHub) RegisterRunner(ctx context.Context, s domain.Scope, name string, labels []string) (domain.RunnerRegistration, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.call(ctx, OpRegisterRunner); err != nil {
		return domain.RunnerRegistration{}, fmt.Errorf("register runner %q in %s: %w", name, s, err)
	}
	s = s.Runners()
	if (s.Owner == "" && s.Enterprise == "") || name == "" || len(labels) == 0 {
		return domain.RunnerRegistration{}, fmt.Errorf("register runner %q in %s: %w: owner, name and at least one label are required", name, s, domain.ErrInvalidRequest)
	}
	if err := g.knownEnterprise(s); err != nil {
		return domain.RunnerRegistration{}, fmt.Errorf("register runner %q in %s: %w", name, s, err)
	}
	for _, r := range g.runners {
		if sameScope(r.scope, s) && strings.EqualFold(r.name, name) {
			return domain.RunnerRegistration{}, fmt.Errorf("register runner %q in %s: %w", name, s, domain.ErrExists)
		}
	}
	g.lastRnr++
	r := &runner{id: g.lastRnr, name: name, labels: slices.Clone(labels), scope: s, jit: newJITConfig(name)}
	g.runners[r.id] = r
	g.jit[r.jit] = r
	return domain.RunnerRegistration{RunnerID: r.id, Name: name, JITConfig: r.jit}, nil
}

// newJITConfig returns an unguessable config shaped like GitHub's
// encoded_jit_config (base64 of a JSON object of base64 files). It carries no
// runner id; the sim finds the runner by the whole string.
func newJITConfig(name string) string {
	enc := base64.StdEncoding.EncodeToString
	runnerFile, _ := json.Marshal(map[string]any{"agentName": name, "poolId": DefaultRunnerGroupID, "ephemeral": true})
	credentials, _ := json.Marshal(map[string]string{"scheme": "OAuth", "token": rand.Text() + rand.Text()})
	files, _ := json.Marshal(map[string]string{".runner": enc(runnerFile), ".credentials": enc(credentials)})
	return enc(files)
}

// ListRunners lists the runners registered at exactly s, by id.
func (g *GitHub) ListRunners(ctx context.Context, s domain.Scope) ([]domain.GitHubRunner, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.call(ctx, OpListRunners); err != nil {
		return nil, fmt.Errorf("list runners of %s: %w", s, err)
	}
	s = s.Runners()
	if err := g.knownEnterprise(s); err != nil {
		return nil, fmt.Errorf("list runners of %s: %w", s, err)
	}
	var out []domain.GitHubRunner
	for _, r := range g.runners {
		if sameScope(r.scope, s) {
			out = append(out, domain.GitHubRunner{
				ID: r.id, Name: r.name, Online: r.online, Busy: r.job != nil, Labels: slices.Clone(r.labels),
			})
		}
	}
	slices.SortFunc(out, func(a, b domain.GitHubRunner) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteRunner removes a runner that is not running a job. A runner process
// waiting for a job is told, as GitHub tells a real one: its onDone is
// called with job id 0 and an empty conclusion.
func (g *GitHub) DeleteRunner(ctx context.Context, s domain.Scope, id int64) error {
	return g.apply(func() error { return g.deleteRunner(ctx, s, id) })
}

func (g *GitHub) deleteRunner(ctx context.Context, s domain.Scope, id int64) error {
	if err := g.call(ctx, OpDeleteRunner); err != nil {
		return fmt.Errorf("delete runner %d: %w", id, err)
	}
	s = s.Runners()
	r := g.runners[id]
	if r == nil || !sameScope(r.scope, s) {
		return fmt.Errorf("delete runner %d in %s: %w", id, s, domain.ErrNotFound)
	}
	if r.job != nil {
		return fmt.Errorf("delete runner %d in %s: %w", id, s, domain.ErrRunnerBusy)
	}
	g.remove(r)
	if r.started && !r.dead && r.onDone != nil {
		g.enqueue(func() { r.onDone(0, "") })
	}
	return nil
}

// RunJIT is the runner process: it starts from a JIT config, goes online and
// is assigned the oldest queued job whose labels are all among the runner's
// (or, if none matches now, the first matching job queued later). On
// assignment the job goes in progress and onStart is called; after the
// job's duration on the clock it completes, onDone is called, and the
// runner is removed (JIT runners are ephemeral). RunJIT returns once the
// runner is online; ctx is the process's lifetime: when it ends the process
// dies, and GitHub notices after Options.OfflineAfter. Callbacks may be nil.
// A config works once; an unknown or used one is an error.
func (g *GitHub) RunJIT(ctx context.Context, jitConfig string, onStart func(jobID int64), onDone func(jobID int64, conclusion string)) error {
	return g.apply(func() error { return g.runJIT(ctx, jitConfig, onStart, onDone) })
}

func (g *GitHub) runJIT(ctx context.Context, jitConfig string, onStart func(int64), onDone func(int64, string)) error {
	if err := g.call(ctx, OpRunJIT); err != nil {
		return fmt.Errorf("run JIT runner: %w", err)
	}
	r := g.jit[jitConfig]
	if r == nil {
		return fmt.Errorf("run JIT runner: %w", ErrInvalidJITConfig)
	}
	if r.started {
		return fmt.Errorf("run JIT runner %q: %w", r.name, ErrJITConfigUsed)
	}
	r.started, r.online = true, true
	r.onStart, r.onDone = onStart, onDone
	r.unwatch = g.watch(ctx, func() { g.kill(r) })
	if j := g.queuedJobFor(r); j != nil {
		g.start(j, r)
	} else {
		g.idle = append(g.idle, r)
	}
	return nil
}

// watch calls kill once ctx ends, unless the returned stop comes first.
// It waits as a task of the clock rather than through context.AfterFunc,
// whose goroutine would act beside a serial clock's turns: there, a
// runner's death takes its turn like every other event.
func (g *GitHub) watch(ctx context.Context, kill func()) (stop func()) {
	ts := clock.TasksOf(g.clk)
	stopped := make(chan struct{})
	ts.Go(func() {
		if ts.Await(ctx.Done(), stopped) == 0 {
			kill()
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(stopped) }) }
}

// serves reports whether r may take j: GitHub's rule is that every label of
// the job is one of the runner's (case-insensitively), within its scope.
func (r *runner) serves(j *job) bool {
	if !covers(r.scope, j.Repo) {
		return false
	}
	for _, want := range j.Labels {
		if !slices.ContainsFunc(r.labels, func(have string) bool { return strings.EqualFold(have, want) }) {
			return false
		}
	}
	return true
}

// queuedJobFor returns the oldest queued job r may take. Called under g.mu.
func (g *GitHub) queuedJobFor(r *runner) *job {
	for _, j := range g.queue {
		if r.serves(j) {
			return j
		}
	}
	return nil
}

// idleRunnerFor returns the waiting runner that came online first and may
// take j. Called under g.mu.
func (g *GitHub) idleRunnerFor(j *job) *runner {
	for _, r := range g.idle {
		if r.serves(j) {
			return r
		}
	}
	return nil
}

// start assigns queued j to idle r. Called under g.mu.
func (g *GitHub) start(j *job, r *runner) {
	now := g.clk.Now()
	g.queue = slices.DeleteFunc(g.queue, func(q *job) bool { return q == j })
	g.idle = slices.DeleteFunc(g.idle, func(q *runner) bool { return q == r })
	r.job = j
	j.Status = StatusInProgress
	j.runner, j.runnerID, j.RunnerName = r, r.id, r.name
	j.startedAt = now
	g.emit("in_progress", j)
	if r.onStart != nil {
		id := j.ID
		g.enqueue(func() { r.onStart(id) })
	}
	due := now.Add(j.duration)
	j.timer = g.clk.AfterFunc(j.duration, func() { g.finish(j, r, due) })
}

// finish completes j when its duration is up, unless something else ended
// it first.
func (g *GitHub) finish(j *job, r *runner, due time.Time) {
	g.mu.Lock()
	if j.Status == StatusInProgress && j.runner == r && !r.dead {
		j.timer = nil
		g.complete(j, j.outcome, due)
		g.release(r, j.ID, j.outcome)
	}
	g.mu.Unlock()
	g.flush()
}

// release frees r of its completed job. A live runner process reports the
// end and leaves; a dead one stays listed until GitHub notices. Called
// under g.mu.
func (g *GitHub) release(r *runner, jobID int64, conclusion string) {
	r.job = nil
	if r.dead {
		return
	}
	g.remove(r)
	if r.onDone != nil {
		g.enqueue(func() { r.onDone(jobID, conclusion) })
	}
}

// remove forgets r. Called under g.mu.
func (g *GitHub) remove(r *runner) {
	delete(g.runners, r.id)
	delete(g.jit, r.jit)
	g.idle = slices.DeleteFunc(g.idle, func(q *runner) bool { return q == r })
	if r.unwatch != nil {
		r.unwatch()
	}
	if r.lost != nil {
		r.lost.Stop()
	}
}

// Kill ends the process of the runner with this id at once, as the end of
// its RunJIT context does (which is noticed in a goroutine of its own). It
// reports false when no process of that runner is alive.
func (g *GitHub) Kill(runnerID int64) bool {
	g.mu.Lock()
	r := g.runners[runnerID]
	ok := r != nil && r.started && !r.dead
	g.mu.Unlock()
	if ok {
		g.kill(r)
	}
	return ok
}

// kill is the death of r's process: it takes no more jobs, its job stops
// advancing, and GitHub notices after OfflineAfter.
func (g *GitHub) kill(r *runner) {
	g.mu.Lock()
	defer g.flush()
	defer g.mu.Unlock()
	if g.runners[r.id] != r || r.dead {
		return
	}
	r.dead = true
	if r.unwatch != nil {
		r.unwatch()
	}
	g.idle = slices.DeleteFunc(g.idle, func(q *runner) bool { return q == r })
	if j := r.job; j != nil && j.timer != nil {
		j.timer.Stop()
		j.timer = nil
	}
	if g.opts.OfflineAfter <= 0 {
		g.notice(r)
		return
	}
	r.lost = g.clk.AfterFunc(g.opts.OfflineAfter, func() {
		g.mu.Lock()
		defer g.flush()
		defer g.mu.Unlock()
		if g.runners[r.id] == r {
			g.notice(r)
		}
	})
}

// notice is GitHub seeing that r's process is gone: r is offline, and the
// job it was running fails. Called under g.mu.
func (g *GitHub) notice(r *runner) {
	r.online = false
	r.lost = nil
	if j := r.job; j != nil {
		r.job = nil
		g.complete(j, ConclusionFailure, g.clk.Now())
	}
}

func sameScope(a, b domain.Scope) bool {
	return strings.EqualFold(a.Enterprise, b.Enterprise) && strings.EqualFold(a.Owner, b.Owner) && strings.EqualFold(a.Repo, b.Repo)
}

// knownEnterprise refuses an enterprise other than Options.Enterprise, as
// GitHub answers 404 for an enterprise it does not know.
func (g *GitHub) knownEnterprise(s domain.Scope) error {
	if s.Enterprise != "" && !strings.EqualFold(s.Enterprise, g.opts.Enterprise) {
		return fmt.Errorf("%w: no enterprise %q", domain.ErrNotFound, s.Enterprise)
	}
	return nil
}
