package appplatform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/autoscale"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
)

// GitHub is the part of the GitHub API the autoscaler uses; *rest.Client
// implements it. ActiveJobs (the queued and in-progress jobs) must read
// every page and fail as a whole.
type GitHub interface {
	ActiveJobs(ctx context.Context, s domain.Scope) ([]domain.GitHubJob, error)
	ListRunners(ctx context.Context, s domain.Scope) ([]domain.GitHubRunner, error)
	DeleteRunner(ctx context.Context, s domain.Scope, id int64) error
}

var _ GitHub = (*rest.Client)(nil)

// Deps are what a Scaler runs on. Every field is optional.
type Deps struct {
	GitHub     GitHub                // nil: a REST client from the Config
	Apps       *AppPlatform          // nil: a client from the Config
	Clock      domain.Clock          // nil: the wall clock
	Log        *slog.Logger          // nil: logs are discarded
	Registerer prometheus.Registerer // nil: metrics are kept but not registered
	// OnCycle, if set, is called by Run after every cycle.
	OnCycle func(CycleReport, error)
}

// Scaler is the standalone demand autoscaler: it polls GitHub job demand,
// scales an App Platform worker with autoscale.Decide, and removes dead
// runners. Cycle is safe to call from one goroutine at a time; Run does
// that every POLL_INTERVAL.
type Scaler struct {
	cfg     Config
	gh      GitHub
	apps    *AppPlatform
	clk     domain.Clock
	log     *slog.Logger
	m       *metrics
	onCycle func(CycleReport, error)

	mu      sync.Mutex
	st      autoscale.State
	ghUntil time.Time // GitHub rate-limited until then
	doUntil time.Time // DigitalOcean rate-limited until then
	// offline holds, for each runner that looked dead (offline, idle,
	// named with the prefix) at the last runner listing, when the polls
	// in a row that saw it so began; nil when the last poll listed none.
	offline map[int64]time.Time
}

// DeadRunnerAge is how long a runner must have looked dead, over at least
// two polls in a row, before the cleanup deletes it. A runner restarting
// to update itself is offline for some seconds; counting polls alone, a
// short POLL_INTERVAL would take it for dead and delete it.
const DeadRunnerAge = 2 * time.Minute

// New returns a Scaler for cfg (as ConfigFromEnv reads it).
func New(cfg Config, deps Deps) (*Scaler, error) {
	if deps.Clock == nil {
		deps.Clock = clock.Real{}
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := cfg.Params.Validate(); err != nil {
		return nil, err
	}
	if pr, ok := cfg.Params.LateProblem(); !ok {
		return nil, &autoscale.ParamsError{Problems: []autoscale.Problem{pr}}
	}
	if cfg.WorkerName == "" || cfg.Scope.Owner == "" {
		return nil, errors.New("app platform autoscaler: the configuration lacks a worker name or a scope")
	}
	if pr := cfg.cleanupProblem(); pr != "" {
		return nil, errors.New("app platform autoscaler: " + pr)
	}
	if deps.GitHub == nil {
		gh, err := rest.New(rest.Options{Token: cfg.GitHubToken, BaseURL: cfg.GitHubAPIURL, Clock: deps.Clock})
		if err != nil {
			return nil, err
		}
		deps.GitHub = gh
	}
	if deps.Apps == nil {
		apps, err := NewAppPlatform(AppOptions{Token: cfg.DOToken, BaseURL: cfg.DOAPIURL, AppID: cfg.AppID, Clock: deps.Clock})
		if err != nil {
			return nil, err
		}
		deps.Apps = apps
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	return &Scaler{cfg: cfg, gh: deps.GitHub, apps: deps.Apps, clk: deps.Clock, log: deps.Log, m: m, onCycle: deps.OnCycle}, nil
}

// CycleReport is what one cycle saw and did.
type CycleReport struct {
	At time.Time
	// Skipped says why the scaling part did not run to a decision, or why
	// the decision was not applied ("" if neither): a transient error, a
	// rate limit, or another writer's change to the worker's count.
	// Nothing was scaled.
	Skipped  string
	Demand   Demand
	Current  int                // the worker's instance_count as read
	Decision autoscale.Decision // zero when no decision was taken
	Decided  bool
	// Scaled: the new count was written and read back. New is the count
	// the worker runs at after the cycle.
	Scaled    bool
	New       int
	Conflicts []string // concurrent spec changes met while scaling
	// Dead-runner cleanup. Offline: runners that look dead (offline,
	// idle, named with the prefix) but not yet for long enough, left for
	// later polls to confirm. Dead: those that looked dead at the last
	// poll too, and at every poll for DeadRunnerAge at least, whose
	// deletion was asked; Deleted the ones removed, Busy those that
	// turned out busy (422) and were left alone.
	Offline int
	Dead    int
	Deleted []string
	Busy    []string
}

// Run polls every POLL_INTERVAL on the clock, the first time at once,
// until ctx ends. A failing cycle is logged and the next one runs as
// usual: transient errors pass by themselves, and a permanent one (bad
// token, missing app or worker) keeps being reported until a human fixes
// it.
func (s *Scaler) Run(ctx context.Context) error {
	s.log.Info("app platform autoscaler started", "config", s.cfg, "poll", s.cfg.Params.PollInterval)
	for {
		rep, err := s.Cycle(ctx, s.clk.Now())
		if s.onCycle != nil {
			s.onCycle(rep, err)
		}
		select {
		case <-ctx.Done():
			s.log.Info("app platform autoscaler stopped")
			return nil
		case <-s.clk.After(s.cfg.Params.PollInterval):
		}
	}
}

// Cycle is one poll at now: count demand, read the worker's count, decide,
// scale and verify, then remove dead runners. A transient error skips the
// rest of the scaling part (never acting on partial data) and is logged as
// a warning; a permanent one is logged as an error. Either is returned,
// joined with any cleanup error.
func (s *Scaler) Cycle(ctx context.Context, now time.Time) (CycleReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := CycleReport{At: now}
	scaleErr := s.scale(ctx, now, &rep)
	if scaleErr != nil && IsTransient(scaleErr) {
		rep.Skipped = scaleErr.Error()
	}
	cleanErr := s.cleanup(ctx, now, &rep)
	err := errors.Join(scaleErr, cleanErr)
	permanent := func(err error) bool { return err != nil && !IsTransient(err) }
	switch {
	case ctx.Err() != nil:
		// shutting down: not a cycle to count
	case permanent(scaleErr) || permanent(cleanErr):
		s.m.cycles.WithLabelValues("failed").Inc()
	case err != nil || rep.Skipped != "":
		s.m.cycles.WithLabelValues("skipped").Inc()
	default:
		s.m.cycles.WithLabelValues("ok").Inc()
	}
	return rep, err
}

// scale is the scaling part of a cycle.
func (s *Scaler) scale(ctx context.Context, now time.Time, rep *CycleReport) error {
	if until := later(s.ghUntil, s.doUntil); now.Before(until) {
		rep.Skipped = "rate limited until " + until.UTC().Format(time.RFC3339)
		s.log.Warn("skipping cycle: an API is rate limited", "until", until)
		return nil
	}
	demand, err := s.demand(ctx)
	if err != nil {
		return s.fail(ctx, now, apiGitHub, err)
	}
	app, err := s.apps.Get(ctx)
	if err != nil {
		return s.fail(ctx, now, apiDO, err)
	}
	current, err := WorkerCount(app.Spec, s.cfg.WorkerName)
	if err != nil {
		return s.fail(ctx, now, apiDO, fmt.Errorf("app %s: %w", s.cfg.AppID, err))
	}
	rep.Demand, rep.Current, rep.New = demand, current, current
	s.m.demand.WithLabelValues("queued").Set(float64(demand.Queued))
	s.m.demand.WithLabelValues("in_progress").Set(float64(demand.InProgress))
	s.m.instances.Set(float64(current))

	before := s.st
	d := autoscale.Decide(s.cfg.Params, &s.st, now, demand.Total(), current)
	rep.Decision, rep.Decided = d, true
	s.recordDecision(ctx, demand, current, d)
	if d.Action == autoscale.ActionNone {
		return nil
	}
	return s.apply(ctx, now, rep, app, d, before)
}

// demand counts the jobs of the scope, every page or nothing.
func (s *Scaler) demand(ctx context.Context) (Demand, error) {
	active, err := s.gh.ActiveJobs(ctx, s.cfg.Scope)
	if err != nil {
		return Demand{}, fmt.Errorf("count demand: %w", err)
	}
	var queued, running []domain.GitHubJob
	for _, j := range active {
		if j.Status == rest.StatusQueued {
			queued = append(queued, j)
		} else {
			running = append(running, j)
		}
	}
	return CountDemand(queued, running, s.cfg.RunnerNamePrefix), nil
}

func (s *Scaler) recordDecision(ctx context.Context, demand Demand, current int, d autoscale.Decision) {
	s.m.decisions.WithLabelValues(d.Action).Inc()
	for _, dir := range []string{autoscale.ActionUp, autoscale.ActionDown} {
		score := 0.0
		if d.Breach == dir {
			score = d.Score
		}
		s.m.score.WithLabelValues(dir).Set(score)
	}
	// A poll that changes nothing is the steady state: DEBUG, or the log
	// is a line per poll interval forever.
	level := slog.LevelInfo
	if d.Action == autoscale.ActionNone {
		level = slog.LevelDebug
	}
	s.log.Log(ctx, level, "autoscaler decision", "action", d.Action, "demand", demand.Total(),
		"queued", demand.Queued, "in_progress", demand.InProgress, "current", current, "new", d.New,
		"capacity", d.Capacity, "breach", d.Breach, "score", round3(d.Score), "reason", d.Reason)
}

// apply writes a scaling decision. A scaling that was never written starts
// no cooldown: the state's cooldown clocks go back to before the decision,
// while the breach, seen on complete data, stays recorded.
func (s *Scaler) apply(ctx context.Context, now time.Time, rep *CycleReport, app *App, d autoscale.Decision, before autoscale.State) error {
	res, err := s.apps.SetWorkerCount(ctx, s.cfg.WorkerName, app, d.New)
	rep.Conflicts = res.Conflicts
	s.m.conflicts.Add(float64(len(res.Conflicts)))
	if len(res.Conflicts) > 0 {
		s.log.Warn("the app spec changed while scaling; only instance_count was applied, on top of the latest spec",
			"worker", s.cfg.WorkerName, "attempts", res.Attempts, "conflicts", res.Conflicts)
	}
	if err != nil {
		if !res.Written {
			s.st.LastUp, s.st.LastDown = before.LastUp, before.LastDown
		}
		return s.fail(ctx, now, apiDO, fmt.Errorf("scale %s %d → %d: %w", s.cfg.WorkerName, rep.Current, d.New, err))
	}
	if res.Superseded != "" {
		// The decision was made on a count that no longer holds: the other
		// writer's count stands, no cooldown starts, and the next poll
		// decides on the count that holds then.
		s.st.LastUp, s.st.LastDown = before.LastUp, before.LastDown
		rep.Skipped = res.Superseded
		if cur, err := WorkerCount(res.App.Spec, s.cfg.WorkerName); err == nil {
			rep.New = cur
			s.m.instances.Set(float64(cur))
		}
		s.m.superseded.Inc()
		s.log.Warn("the worker's count changed under the decision; skipping, the next poll decides", "worker", s.cfg.WorkerName,
			"action", d.Action, "decided_on", rep.Current, "decided", d.New, "now", rep.New, "written", res.Written, "why", res.Superseded)
		return nil
	}
	rep.Scaled, rep.New = true, d.New
	s.m.instances.Set(float64(d.New))
	s.log.Info("scaled worker", "worker", s.cfg.WorkerName, "action", d.Action, "from", rep.Current, "to", d.New,
		"attempts", res.Attempts, "deployment", res.App.Deployment())
	return nil
}

// fail records an API failure: counted, logged as a warning when it may
// pass by itself (the cycle is skipped) or as an error when a human must
// act, and a rate limit remembered so that no call is made before it ends.
func (s *Scaler) fail(ctx context.Context, now time.Time, api string, err error) error {
	if ctx.Err() != nil {
		return err // shutting down: nothing to report
	}
	if until := rateLimitedUntil(err); until.After(now) {
		if api == apiGitHub {
			s.ghUntil = until
		} else {
			s.doUntil = until
		}
	}
	if IsTransient(err) {
		s.m.apiErrors.WithLabelValues(api, "transient").Inc()
		s.log.Warn("skipping cycle: transient API error", "api", api, "err", err)
		return err
	}
	s.m.apiErrors.WithLabelValues(api, "permanent").Inc()
	s.log.Error("autoscaler cannot work until this is fixed", "api", api, "err", err)
	return err
}

// cleanup removes dead runners: offline, idle, and named with the prefix
// when one is set, at this poll and the one before, and at every poll
// since DeadRunnerAge ago at least. A runner is offline for a moment when
// it has just registered or is restarting, and deleting it then breaks
// it; one still offline minutes later, by the clock rather than by a
// count of polls however close together, has crashed. A runner that took
// a job since it was listed (422) is left alone; one already gone is fine.
func (s *Scaler) cleanup(ctx context.Context, now time.Time, rep *CycleReport) error {
	if s.cfg.NoDeadRunnerCleanup {
		return nil
	}
	before := s.offline
	s.offline = nil // a poll that lists no runners breaks the run of sightings
	if now.Before(s.ghUntil) {
		return nil
	}
	runners, err := s.gh.ListRunners(ctx, s.cfg.Scope)
	if err != nil {
		return s.fail(ctx, now, apiGitHub, fmt.Errorf("dead-runner cleanup: %w", err))
	}
	var dead []domain.GitHubRunner
	s.offline = map[int64]time.Time{}
	for _, r := range DeadRunners(runners, s.cfg.RunnerNamePrefix) {
		since, seenBefore := before[r.ID]
		if !seenBefore {
			since = now
		}
		s.offline[r.ID] = since
		if seenBefore && now.Sub(since) >= DeadRunnerAge {
			dead = append(dead, r)
		} else {
			rep.Offline++
		}
	}
	rep.Dead = len(dead)
	for _, r := range dead {
		err := s.gh.DeleteRunner(ctx, s.cfg.Scope, r.ID)
		switch {
		case err == nil:
			rep.Deleted = append(rep.Deleted, r.Name)
			s.m.deleted.Inc()
			s.log.Info("deleted dead runner", "runner", r.Name, "runner_id", r.ID)
		case errors.Is(err, domain.ErrRunnerBusy):
			rep.Busy = append(rep.Busy, r.Name)
			s.log.Info("dead runner took a job; left alone", "runner", r.Name, "runner_id", r.ID)
		case errors.Is(err, domain.ErrNotFound):
			// removed by someone else since it was listed
		default:
			return s.fail(ctx, now, apiGitHub, fmt.Errorf("dead-runner cleanup: %w", err))
		}
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }
