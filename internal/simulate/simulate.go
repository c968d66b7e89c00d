// Package simulate replays a team's job history against a pool
// configuration through the real control plane — the converger, dispatch,
// provisioning, release and autoscaling that serve runs — on the simulated
// cloud and GitHub and a virtual clock, as fast as the machine allows,
// and reports the queue times it would give next to the ones the history
// recorded.
package simulate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/demo"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/history"
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
	// Tail is how long the replay runs after the last job's arrival and
	// longest run, so that every job can finish; 15 min when zero.
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
	// Jobs is the history's; Replayed those with a run time (completed
	// after a start), which are replayed.
	Jobs     int `json:"jobs"`
	Replayed int `json:"replayed"`
	// From and To bound the history's arrivals.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Simulated is the replay's jobs as the control plane served them.
	Simulated demo.JobsReport `json:"simulated"`
	// Recorded is the queue time the history itself recorded.
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
	scheduled, recorded, longest := replayable(jobs, rep.From)
	rep.Replayed = len(scheduled)
	if len(recorded) > 0 {
		rep.Recorded = demo.LatenciesOf(recorded)
	}
	warm := o.warm()
	for i := range scheduled {
		scheduled[i].At += warm
	}
	start := rep.From.Add(-warm)
	res, err := demo.Run(ctx, demo.Options{
		Config: o.Config, Environment: o.Environment, Duration: warm + rep.To.Sub(rep.From) + longest + o.Tail, Start: start,
		Interval: o.Interval, Seed: o.Seed, Latency: o.Latency, FamilyLatency: o.FamilyLatency, Scheduled: scheduled,
		Progress: arrivals(o.Progress, scheduled, start),
	})
	if err != nil {
		return Report{}, fmt.Errorf("simulate: %w", err)
	}
	if res.Interrupted {
		// The jobs not yet arrived, and those still running, would read as
		// a report of the whole history: give none.
		return Report{}, interrupted(ctx, res.Virtual, scheduled, res.Stream)
	}
	rep.Simulated, rep.CloudCalls, rep.Virtual = res.Jobs, res.CloudCalls, res.Virtual
	rep.InstanceHours = res.InstanceHours
	rep.Bill = prices.bill(res.InstanceHours, rep.Simulated.ByStatus["completed"])
	return rep, nil
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

// replayable schedules the jobs that ran (sorted by arrival) at their
// arrival after from, each to run as long as it ran, and returns with them
// every job's recorded queue time in seconds and the longest run.
func replayable(jobs []history.Job, from time.Time) (scheduled []demo.Scheduled, recorded []float64, longest time.Duration) {
	for _, j := range jobs {
		if q, ok := j.QueueTime(); ok {
			recorded = append(recorded, q.Seconds())
		}
		if j.Started == nil || j.Completed == nil {
			continue // it never ran: nothing to replay
		}
		took := j.Completed.Sub(*j.Started)
		longest = max(longest, took)
		scheduled = append(scheduled, demo.Scheduled{At: j.Created.Sub(from), Job: ghsim.JobSpec{
			Repo: j.Repo, Name: j.Name, Workflow: j.Workflow, Labels: j.Labels, RunID: j.RunID, Duration: took}})
	}
	return scheduled, recorded, longest
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
