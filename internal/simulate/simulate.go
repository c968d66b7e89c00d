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
	Jobs   []history.Job
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
	// Jobs is the history's; Replayed those with a run time (completed
	// after a start), which are replayed.
	Jobs, Replayed int
	// From and To bound the history's arrivals.
	From, To time.Time
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
// the first, and runs as long as it ran.
func Run(ctx context.Context, o Options) (Report, error) {
	if o.Config == nil {
		return Report{}, errors.New("simulate: no configuration")
	}
	if len(o.Jobs) == 0 {
		return Report{}, errors.New("simulate: no jobs to replay")
	}
	prices := DefaultPrices()
	if o.Prices != nil {
		prices = *o.Prices
	}
	if err := prices.Covers(o.Config); err != nil {
		return Report{}, fmt.Errorf("simulate: %w", err)
	}
	o = o.withDefaults()
	if o.Tail <= 0 {
		o.Tail = 15 * time.Minute
	}
	jobs := slices.Clone(o.Jobs)
	slices.SortStableFunc(jobs, func(a, b history.Job) int { return a.Created.Compare(b.Created) })
	rep := Report{Jobs: len(jobs), From: jobs[0].Created, To: jobs[len(jobs)-1].Created}
	var scheduled []demo.Scheduled
	var recorded []float64
	var longest time.Duration
	for _, j := range jobs {
		if q, ok := j.QueueTime(); ok {
			recorded = append(recorded, q.Seconds())
		}
		if j.Started == nil || j.Completed == nil {
			continue // it never ran: nothing to replay
		}
		took := j.Completed.Sub(*j.Started)
		longest = max(longest, took)
		scheduled = append(scheduled, demo.Scheduled{At: j.Created.Sub(rep.From), Job: ghsim.JobSpec{
			Repo: j.Repo, Name: j.Name, Workflow: j.Workflow, Labels: j.Labels, RunID: j.RunID, Duration: took}})
	}
	rep.Replayed = len(scheduled)
	if len(recorded) > 0 {
		rep.Recorded = demo.LatenciesOf(recorded)
	}
	warm := o.Lead
	switch {
	case warm == 0:
		warm = 5 * time.Minute
	case warm < 0:
		warm = 0
	}
	for i := range scheduled {
		scheduled[i].At += warm
	}
	start := rep.From.Add(-warm)
	var progress func(time.Time)
	if o.Progress != nil {
		progress = func(at time.Time) {
			arrived, _ := slices.BinarySearchFunc(scheduled, at.Sub(start), func(s demo.Scheduled, d time.Duration) int {
				return cmp.Compare(s.At, d+1)
			})
			o.Progress(at, arrived, len(scheduled))
		}
	}
	res, err := demo.Run(ctx, demo.Options{
		Config: o.Config, Duration: warm + rep.To.Sub(rep.From) + longest + o.Tail, Start: start,
		Interval: o.Interval, Seed: o.Seed, Latency: o.Latency, FamilyLatency: o.FamilyLatency, Scheduled: scheduled, Progress: progress,
	})
	if err != nil {
		return rep, fmt.Errorf("simulate: %w", err)
	}
	rep.Simulated, rep.CloudCalls, rep.Virtual = res.Jobs, res.CloudCalls, res.Virtual
	rep.InstanceHours = res.InstanceHours
	rep.Bill = prices.bill(res.InstanceHours, rep.Simulated.ByStatus["completed"])
	return rep, nil
}
