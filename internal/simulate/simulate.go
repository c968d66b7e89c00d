// Package simulate replays a team's job history against a pool
// configuration through the real control plane — the converger, dispatch,
// provisioning, release and autoscaling that serve runs — on the simulated
// cloud and GitHub and a virtual clock, as fast as the machine allows,
// and reports the queue times it would give next to the ones the history
// recorded for the same jobs, and what the pools would cost over the
// replay.
package simulate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/demo"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/history"
	"github.com/bullpen-ci/bullpen/internal/intake"
)

// Options configure a replay.
type Options struct {
	Config *config.Config
	// Environment is the environment whose pools serve the jobs, as
	// serve's --environment; "" picks one as demo.Environment does. Jobs
	// for other environments' pools are rejected, as serve rejects them.
	Environment string
	Jobs        []history.Job
	// Latency is the simulated cloud's timings; demo.DefaultLatency when
	// zero. FamilyLatency overrides them for the instance types of a
	// family ("m7a"); Timings sets both from a file.
	Latency       sim.Latency
	FamilyLatency map[string]sim.Latency
	// Interval is the converger's; 30 s when zero, as serve's default.
	Interval time.Duration
	Seed     uint64
	// Tail is how long the replay may run after the history's last
	// completion (the latest of the replayed jobs' arrival plus run time),
	// so that jobs the replay starts later than the history did can
	// finish; 15 min when zero. The replay ends sooner, at the first
	// converger cycle at which every job it took is done.
	Tail time.Duration
	// Progress, when set, is told how far the replay has come: the virtual
	// time reached, the jobs arrived so far and in all.
	Progress func(at time.Time, arrived, total int)
	// Prices price the instance-hours; DefaultPrices when nil.
	Prices *Prices
	// Lead is how long the control plane runs before the first job
	// arrives, so that pools have filled as they would have; 5 min when
	// zero, none when negative.
	Lead time.Duration
}

// Report is what a replay found.
type Report struct {
	// Environment is the one whose pools served the replay; OtherPools
	// those it left out, as "name@environment".
	Environment string   `json:"environment"`
	OtherPools  []string `json:"other_environment_pools,omitempty"`
	// Jobs is the history's. NotRun are those without a run time (never
	// started, or not completed), which are not replayed. NotForBullpen
	// ran, but their labels leave them to other runners (GitHub-hosted
	// ones, another environment's bullpen): those that came before
	// bullpen's last are queued on the simulated GitHub as they were, and
	// the intake ignores them.
	// Replayed are the rest, bullpen's jobs, served or refused.
	Jobs          int `json:"jobs"`
	NotRun        int `json:"not_run"`
	NotForBullpen int `json:"not_for_bullpen"`
	Replayed      int `json:"replayed"`
	// From and To bound the history's arrivals.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Window runs from the first replayed job's arrival to the last
	// completion of a job the replay served. Run is what the
	// instance-hours and the bill cover: from the first arrival to the
	// end of the replay, the first converger cycle at which every job it
	// took was done (or Tail after the history's last completion, if
	// sooner). Start is when the replay began, the warm-up lead before
	// the first arrival, in which the pools fill unbilled.
	Window Window    `json:"window"`
	Run    Window    `json:"run"`
	Start  time.Time `json:"start"`
	// Simulated is the replay's jobs as the control plane served them.
	Simulated demo.JobsReport `json:"simulated"`
	// Waits are the queue times of bullpen's jobs again, with those no
	// runner took by the replay's end counted as waiting until then.
	Waits Waits `json:"queue_time_with_not_started_seconds"`
	// Recorded is the queue time the history recorded for the jobs the
	// replay served, so that it sets the same jobs side by side with
	// Simulated.QueueTime (which also counts the re-runs of jobs a spot
	// interruption failed).
	Recorded demo.Latencies `json:"recorded_queue_time_seconds"`
	// InstanceHours is the replay's instance time by type, option and
	// state, and Bill its estimated cost.
	InstanceHours []demo.InstanceHours `json:"instance_hours"`
	Bill          Bill                 `json:"bill"`
	CloudCalls    map[string]int       `json:"cloud_calls"`
	Virtual       string               `json:"virtual_duration"`
}

// Run replays o.Jobs: each is queued at its original arrival, relative to
// the first, and runs as long as it ran. A replay that ctx ends before it
// is complete returns no report and an error wrapping ctx's.
func Run(ctx context.Context, o Options) (Report, error) {
	prices, err := o.check()
	if err != nil {
		return Report{}, err
	}
	if o.Environment, err = demo.Environment(o.Config, o.Environment); err != nil {
		return Report{}, fmt.Errorf("simulate: %w", err)
	}
	o = o.withDefaults()
	if o.Tail <= 0 {
		o.Tail = 15 * time.Minute
	}
	jobs := slices.Clone(o.Jobs)
	slices.SortStableFunc(jobs, func(a, b history.Job) int { return a.Created.Compare(b.Created) })
	rep := Report{Environment: o.Environment, OtherPools: demo.OtherPools(o.Config, o.Environment),
		Jobs: len(jobs), From: jobs[0].Created, To: jobs[len(jobs)-1].Created}
	route := router(o.Config, o.Environment)
	plan := planReplay(jobs, func(labels []string) bool { return route(labels).Ours })
	rep.NotRun, rep.NotForBullpen, rep.Replayed = plan.notRun, plan.notOurs, plan.replayed
	if plan.replayed == 0 {
		err := fmt.Errorf("simulate: nothing to replay: of %d jobs, %d never ran to completion and %d are not for bullpen "+
			"in environment %s (their labels leave them to GitHub's runners or to another environment's or region's stack)",
			rep.Jobs, rep.NotRun, rep.NotForBullpen, o.Environment)
		if plan.notOurs > 0 && o.Environment != intake.DefaultEnvironment {
			err = fmt.Errorf("%w; a job without an env= label is %s's", err, intake.DefaultEnvironment)
		}
		return Report{}, err
	}
	// The replay starts the lead before bullpen's first job: other jobs
	// that came earlier arrive as it starts.
	warm := o.warm()
	for i := range plan.scheduled {
		plan.scheduled[i].At = max(plan.scheduled[i].At+warm, 0)
	}
	start := plan.firstArrival.Add(-warm)
	duration := warm + plan.lastEnd + o.Tail
	res, err := demo.Run(ctx, demo.Options{
		Config: o.Config, Environment: o.Environment, Duration: duration, Start: start,
		Interval: o.Interval, Seed: o.Seed, Latency: o.Latency, FamilyLatency: o.FamilyLatency, Scheduled: plan.scheduled,
		Progress: arrivals(o.Progress, plan.scheduled, start),
		// The pools filling before the first arrival, and idling once
		// every job is done, would be billed to the history's jobs.
		BillFrom: plan.firstArrival, EndWhenServed: true,
	})
	if err != nil {
		return Report{}, fmt.Errorf("simulate: %w", err)
	}
	if res.Interrupted {
		// The jobs not yet arrived, and those still running, would read as
		// a report of the whole history: give none.
		return Report{}, interrupted(ctx, res.Virtual, plan.scheduled, res.Stream)
	}
	recorded, last := plan.served(res.Stream)
	if len(recorded) > 0 {
		rep.Recorded = demo.LatenciesOf(recorded)
	}
	rep.Window = Window{From: plan.firstArrival, To: plan.lastArrival}
	if last.After(rep.Window.To) {
		rep.Window.To = last
	}
	rep.Run, rep.Start = Window{From: plan.firstArrival, To: res.End}, start
	rep.Simulated, rep.CloudCalls, rep.Virtual = res.Jobs, res.CloudCalls, res.Virtual
	rep.InstanceHours = res.InstanceHours
	rep.Waits = waitsOf(res.Stream, route, res.End)
	rep.Bill = prices.bill(res.InstanceHours, rep.Simulated.ByStatus["completed"])
	return rep, nil
}

// Window is a span of the replay's virtual time, which is the history's.
type Window struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// check refuses a replay without a configuration or jobs, or whose prices
// lack one of the machines its configuration launches, and returns the
// prices: DefaultPrices unless o.Prices is set.
func (o Options) check() (Prices, error) {
	if o.Config == nil {
		return Prices{}, errors.New("simulate: no configuration")
	}
	if len(o.Jobs) == 0 {
		return Prices{}, errors.New("simulate: no jobs to replay")
	}
	prices := DefaultPrices()
	if o.Prices != nil {
		prices = *o.Prices
	}
	if err := prices.Covers(o.Config); err != nil {
		return Prices{}, fmt.Errorf("simulate: %w", err)
	}
	return prices, nil
}

// router decides, as the intake of env's stack does on cfg, whether a job
// with these labels is bullpen's, which pool serves it, and whether the
// intake rejects it.
func router(cfg *config.Config, env string) func(labels []string) intake.Decision {
	r := intake.Routing{Environment: env, Pools: map[string]domain.Pool{}, Runners: cfg.Runners, ImageRef: cfg.ImageRef}
	for _, p := range cfg.Pools {
		r.Pools[p.Name] = p
	}
	if d, ok := cfg.Runner("default"); ok {
		r.Default = d
	}
	return func(labels []string) intake.Decision { return intake.Decide(labels, r) }
}

// replayPlan is the history as the replay queues it.
type replayPlan struct {
	// scheduled are the jobs that ran, at their arrival after bullpen's
	// first (before it for earlier ones), each to run as long as it ran,
	// up to bullpen's last: other runners' jobs after it would only keep
	// the replay, and its bill, going once bullpen's jobs are done.
	// queued are those jobs, in the same order, with whether each is
	// bullpen's.
	scheduled []demo.Scheduled
	queued    []queuedJob
	// replayed counts bullpen's jobs among them, notOurs the others;
	// notRun the jobs that did not run, which are not queued.
	replayed, notOurs, notRun int
	// firstArrival and lastArrival bound bullpen's jobs' arrivals, and
	// lastEnd is the latest of their arrivals plus run times, after the
	// first.
	firstArrival, lastArrival time.Time
	lastEnd                   time.Duration
}

// queuedJob is a history job the replay queues.
type queuedJob struct {
	key  jobKey
	ours bool
	wait time.Duration // the queue time the history recorded
}

// jobKey is what tells a queued job apart on the simulated GitHub, which
// gives the jobs ids of its own: jobs of one key are told apart by their
// order of arrival.
type jobKey struct {
	repo           string
	run            int64
	workflow, name string
}

func keyOf(repo string, run int64, workflow, name string) jobKey {
	// The simulated GitHub names the jobs that have no name as it does.
	return jobKey{repo: strings.ToLower(repo), run: run, workflow: cmp.Or(workflow, ghsim.DefaultWorkflow), name: cmp.Or(name, ghsim.DefaultJobName)}
}

// planReplay queues the jobs that ran (sorted by arrival); ours tells
// bullpen's jobs from the others.
func planReplay(jobs []history.Job, ours func(labels []string) bool) replayPlan {
	var p replayPlan
	for _, j := range jobs {
		if j.Started != nil && j.Completed != nil && ours(j.Labels) {
			p.firstArrival = j.Created
			break
		}
	}
	// A job of no run would start a run of its own, whose id the simulated
	// GitHub picks: give it one past the history's, so that it is known.
	nextRun := int64(0)
	for _, j := range jobs {
		nextRun = max(nextRun, j.RunID)
	}
	last := 0 // bullpen's last job and those before it are scheduled
	for _, j := range jobs {
		wait, ok := j.QueueTime()
		if !ok || j.Completed == nil {
			p.notRun++
			continue // it never ran: nothing to replay
		}
		run := j.RunID
		if run == 0 {
			nextRun++
			run = nextRun
		}
		took := j.Completed.Sub(*j.Started)
		at := j.Created.Sub(p.firstArrival)
		q := queuedJob{key: keyOf(j.Repo, run, j.Workflow, j.Name), ours: ours(j.Labels), wait: wait}
		p.queued = append(p.queued, q)
		p.scheduled = append(p.scheduled, demo.Scheduled{At: at, Job: ghsim.JobSpec{
			Repo: j.Repo, Name: j.Name, Workflow: j.Workflow, Labels: j.Labels, RunID: run, Duration: took}})
		if !q.ours {
			p.notOurs++
			continue
		}
		p.replayed++
		p.lastArrival = j.Created
		p.lastEnd = max(p.lastEnd, at+took)
		last = len(p.scheduled)
	}
	p.scheduled, p.queued = p.scheduled[:last], p.queued[:last]
	return p
}

// served matches the simulated GitHub's jobs with the queued ones and
// returns the recorded queue times, in seconds, of bullpen's jobs that a
// runner took in the replay, and the last completion of one of them or
// of their re-runs.
func (p replayPlan) served(stream []ghsim.JobRecord) (recorded []float64, last time.Time) {
	byKey, ours := map[jobKey][]queuedJob{}, map[jobKey]bool{}
	for _, q := range p.queued {
		byKey[q.key] = append(byKey[q.key], q)
		ours[q.key] = ours[q.key] || q.ours
	}
	for _, r := range stream { // in the order they were queued
		key := keyOf(r.Repo, r.RunID, r.Workflow, r.Name)
		if r.RunAttempt != 1 {
			// A re-run the replay made of a job a spot interruption
			// failed: no job of the history, but bullpen serves it.
			if ours[key] && r.CompletedAt.After(last) {
				last = r.CompletedAt
			}
			continue
		}
		same := byKey[key]
		if len(same) == 0 {
			continue
		}
		q := same[0]
		byKey[key] = same[1:]
		if !q.ours || r.StartedAt.IsZero() {
			continue
		}
		recorded = append(recorded, q.wait.Seconds())
		if r.CompletedAt.After(last) {
			last = r.CompletedAt
		}
	}
	return recorded, last
}

// warm is how long the control plane runs before the first arrival: Lead,
// 5 min when zero, none when negative.
func (o Options) warm() time.Duration {
	switch {
	case o.Lead == 0:
		return 5 * time.Minute
	case o.Lead < 0:
		return 0
	}
	return o.Lead
}

// arrivals turns the demo's progress (the virtual time reached) into the
// replay's, counting the scheduled jobs arrived by then; nil when progress
// is. The jobs are in arrival order, so a binary search counts them.
func arrivals(progress func(at time.Time, arrived, total int), scheduled []demo.Scheduled, start time.Time) func(time.Time) {
	if progress == nil {
		return nil
	}
	return func(at time.Time) {
		arrived, _ := slices.BinarySearchFunc(scheduled, at.Sub(start), func(s demo.Scheduled, d time.Duration) int {
			return cmp.Compare(s.At, d+1)
		})
		progress(at, arrived, len(scheduled))
	}
}

// interrupted is the error of a replay ctx ended after virtual time, when
// the simulated GitHub had seen arrived of the scheduled jobs.
func interrupted(ctx context.Context, virtual string, scheduled []demo.Scheduled, arrived []ghsim.JobRecord) error {
	return fmt.Errorf("simulate: interrupted after %s of virtual time, %d of %d jobs arrived: no report: %w",
		virtual, len(arrived), len(scheduled), ctx.Err())
}
