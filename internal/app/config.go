package app

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/api"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/intake"
	"github.com/bullpen-ci/bullpen/internal/schedule"
)

// The configuration in force, and what each loop reads of it.

// Config returns the configuration in force.
func (a *App) Config() *config.Config { return a.cfg.Load() }

// SetConfig replaces the configuration; loops see it on their next cycle.
func (a *App) SetConfig(c *config.Config) { a.cfg.Store(c) }

func (a *App) pools() []domain.Pool { return a.Config().PoolsFor(a.opts.Environment) }

// notePools logs which pools of cfg this stack serves, and those it leaves
// to stacks of other environments. Leaving some is what environments are
// for; a file that names environments, none of them this stack's, is most
// likely read with the wrong --environment (serve's default is production),
// so that is a warning even when pools without environment: are served:
// those belong to every stack, so they say nothing of the flag, and the
// jobs meant for the file's environments go unanswered.
func (a *App) notePools(cfg *config.Config, msg string) {
	if cfg == nil {
		return
	}
	var served, others []string
	for _, p := range cfg.Pools {
		if config.ServedIn(p, a.opts.Environment) {
			served = append(served, p.Name)
		} else {
			others = append(others, p.Name+"@"+p.Environment)
		}
	}
	attrs := []any{"path", a.sourceName(), "environment", a.opts.Environment, "pools", len(served),
		"served", strings.Join(served, ","), "other_environments", strings.Join(others, ",")}
	a.opts.Log.Info(msg, attrs...)
	if named := cfg.Environments(); len(named) > 0 && !cfg.NamesEnvironment(a.opts.Environment) {
		what := "no pool of the configuration is this environment's"
		if len(served) > 0 {
			what = "no pool of the configuration names this environment, so only those naming none are served"
		}
		a.opts.Log.Warn(what+": set --environment to one of the file's environments to serve its pools and take its jobs",
			append(attrs, "file_environments", strings.Join(named, ","))...)
	}
}

// sourceName names where the configuration comes from.
func (a *App) sourceName() string {
	if a.source != nil {
		return a.source.Name()
	}
	return a.opts.ConfigPath
}

// scaledPoolSpecs is poolSpecs, read once a converger cycle; the pool
// autoscaler forgets the pools it no longer scales, whose last demand and
// scores it would otherwise serve for as long as the process runs.
func (a *App) scaledPoolSpecs() []converger.PoolSpec {
	specs := a.poolSpecs()
	pools := make([]domain.Pool, len(specs))
	for i, ps := range specs {
		pools[i] = ps.Pool
	}
	a.Scaler.Retain(pools)
	return specs
}

func (a *App) poolSpecs() []converger.PoolSpec {
	cfg := a.Config()
	var out []converger.PoolSpec
	for _, p := range cfg.PoolsFor(a.opts.Environment) {
		r, ok := cfg.Runner(p.Runner)
		if !ok {
			continue // config validation makes this impossible
		}
		out = append(out, converger.PoolSpec{Pool: p, Runner: r})
	}
	return out
}

func (a *App) poolInfos() []api.PoolInfo {
	var out []api.PoolInfo
	now := a.opts.Clock.Now()
	for _, p := range a.pools() {
		info := api.PoolInfo{Name: p.Name, Environment: p.Environment, Runner: p.Runner, Timezone: p.Timezone}
		if at, ok := schedule.NextChange(p, now, 7*24*time.Hour); ok {
			info.NextChange, info.Next = at, schedule.Resolve(p, at).Entry
		}
		out = append(out, info)
	}
	return out
}

func (a *App) routing() intake.Routing {
	cfg := a.Config()
	r := intake.Routing{Environment: a.opts.Environment, Pools: map[string]domain.Pool{}, Runners: cfg.Runners, ImageRef: cfg.ImageRef}
	if a.opts.Cloud == "aws" {
		r.Region = a.opts.AWS.Region
	}
	for _, p := range cfg.Pools {
		r.Pools[p.Name] = p
	}
	if d, ok := cfg.Runner("default"); ok {
		r.Default = d
	}
	return r
}

// ours says whether the intake takes a job with these labels as this
// environment's, on the configuration in force: the reconciler admits only
// those of the queued jobs it finds unrecorded.
func (a *App) ours(jobLabels []string) bool { return intake.Decide(jobLabels, a.routing()).Ours }

// takes says whether the intake would now serve a job with these labels,
// on the configuration in force: the reconciler sends a job rejected under
// an earlier one back to it.
func (a *App) takes(jobLabels []string) bool {
	d := intake.Decide(jobLabels, a.routing())
	return d.Ours && d.Reject == ""
}

// respec is the runner class and machine the configuration in force gives
// a launch job, its labels routed again: the provisioner serves a backlog
// with the runner as the operator has since changed it. A job routed
// elsewhere now, or no longer served, keeps what it arrived with.
func (a *App) respec(j domain.Job) (string, domain.RunnerSpec, bool) {
	d := intake.Decide(j.Labels, a.routing())
	if !d.Ours || d.Reject != "" || d.Route != j.Route || d.Pool != j.Pool {
		return "", domain.RunnerSpec{}, false
	}
	return d.Runner, d.Spec, true
}

// reuseAllowed: a job of a pool that does not reuse instances gets a fresh
// machine; other jobs may take an idle reused one.
func (a *App) reuseAllowed(j domain.Job) bool {
	p, ok := a.Config().Pool(j.Pool)
	return !ok || p.Reuse
}

// reusedRunner says whether a pool of this stack that reuses its instances
// runs the runner class: only those offer idle instances to its resource
// pool.
func (a *App) reusedRunner(runner string) bool {
	for _, p := range a.pools() {
		if p.Reuse && p.Runner == runner {
			return true
		}
	}
	return false
}

// policy is an instance's after-job policy: its pool's settings.
func (a *App) policy(in domain.Instance) agents.Policy {
	p, ok := a.Config().Pool(in.Pool)
	if !ok {
		return agents.Policy{}
	}
	return agents.Policy{Reuse: p.Reuse, MaxJobs: p.MaxJobsPerInstance, MaxAge: p.MaxAge, IdleLifetime: p.HotIdleLifetime}
}

func (a *App) scope(j domain.Job) domain.Scope {
	owner, repo, _ := strings.Cut(j.Repo, "/")
	switch a.opts.RunnerScope {
	case "org":
		return domain.Scope{Owner: owner}
	case "enterprise":
		// Runners register at the enterprise; its jobs are looked for in
		// the repository, as GitHub lists none of a whole enterprise.
		return domain.Scope{Enterprise: a.opts.Enterprise, Owner: owner, Repo: repo}
	}
	return domain.Scope{Owner: owner, Repo: repo}
}

// poolStatus is the status the converger last recorded for pool.
func (a *App) poolStatus(ctx context.Context, pool string) (domain.PoolStatus, bool, error) {
	list, err := a.Store.ListPoolStatus(ctx)
	if err != nil {
		return domain.PoolStatus{}, false, err
	}
	for _, s := range list {
		if s.Name == pool {
			return s, true, nil
		}
	}
	return domain.PoolStatus{}, false, nil
}

// demand is what a pool's autoscaler follows: the jobs routed to the pool
// that are queued or in progress. A job GitHub holds for an approval waits
// for a person, for hours maybe: machines started for it would idle.
func (a *App) demand(ctx context.Context, pool string) (int, error) {
	list, err := a.Store.ListJobs(ctx, domain.JobFilter{Pool: pool,
		Statuses: []domain.JobStatus{domain.JobQueued, domain.JobAssigned, domain.JobRunning}})
	n := 0
	for _, j := range list {
		if !j.HeldForApproval() {
			n++
		}
	}
	return n, err
}

// scopes are where the reaper looks for queued jobs and dead runners: the
// repositories of the jobs seen lately, ten a cycle in turn (with
// organisation or enterprise runners, the repositories too, which share
// one home for their runners: an organisation's jobs are not listed whole,
// at three calls for each of its repositories every cycle), and with a
// GitHub App a tenth of its installations' repositories in turn, so that
// every one is looked at every ten cycles.
func (a *App) scopes(ctx context.Context) []domain.Scope {
	recent, err := a.Store.ListJobs(ctx, domain.JobFilter{Limit: 1000, Newest: true})
	if err != nil {
		a.opts.Log.Warn("list recent jobs for reconciliation", "err", err)
		return nil
	}
	seen := map[domain.Scope]bool{}
	var out []domain.Scope
	add := func(s domain.Scope) {
		switch a.opts.RunnerScope {
		case "org":
			s.OrgRunners = true
		case "enterprise":
			s.Enterprise = a.opts.Enterprise
		}
		if s.Owner != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	repos := map[string]bool{}
	for _, j := range recent {
		repos[j.Repo] = true
	}
	for _, name := range rotate(slices.Sorted(maps.Keys(repos)), min(len(repos), recentPerCycle), &a.recentCursor) {
		owner, repo, _ := strings.Cut(name, "/")
		add(domain.Scope{Owner: owner, Repo: repo})
	}
	for _, s := range a.installedRepositories(ctx) {
		add(s)
	}
	return out
}

// recentPerCycle bounds the repositories of recent jobs the reaper looks
// at each cycle, taken in turn: a look costs about four calls, and 200
// repositories looked at every minute spent 48,000 calls an hour where an
// installation has 5,000 to 12,500.
const recentPerCycle = 10

// rotate is the next share of all after cursor's place, wrapping round,
// and moves the cursor on.
func rotate[T any](all []T, share int, cursor *atomic.Int64) []T {
	if len(all) == 0 || share <= 0 {
		return nil
	}
	start := int((cursor.Add(int64(share)) - int64(share)) % int64(len(all)))
	out := make([]T, 0, share)
	for i := range share {
		out = append(out, all[(start+i)%len(all)])
	}
	return out
}

// reconcileTurns is how many cycles it takes to look at every repository of
// the App's installations.
const reconcileTurns = 10

// installedRepositories is this cycle's share of the App's installations'
// repositories; none with a token or the simulated GitHub.
func (a *App) installedRepositories(ctx context.Context) []domain.Scope {
	lister, ok := a.GitHub.(interface {
		Repositories(context.Context) ([]domain.Scope, error)
	})
	if !ok {
		return nil
	}
	all, err := lister.Repositories(ctx)
	if err != nil {
		a.opts.Log.Warn("list the installations' repositories for reconciliation", "err", err)
		return nil
	}
	if len(all) == 0 {
		return nil
	}
	return rotate(all, (len(all)+reconcileTurns-1)/reconcileTurns, &a.reconcileCursor)
}
