package simulate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/demo"
	"github.com/bullpen-ci/bullpen/internal/history"
)

// SuggestOptions configure a search for pool schedules.
type SuggestOptions struct {
	Options
	// TargetP90 is the queue time that 90% of each pool's jobs, in each
	// hour of the week, should start within.
	TargetP90 time.Duration
	// Rounds bounds the replays after the first estimate; 4 when zero.
	Rounds int
	// OnRound, when set, is told of each replay as it ends.
	OnRound func(Round)
}

// Round is one replay of the search.
type Round struct {
	Round int `json:"round"`
	// PoolP90 is the p90 queue time, in seconds, of every pool job over
	// the whole history, the members' and the overflow's cold starts, a
	// job that never started counting as waiting until the replay's end
	// (Report.Waits); PoolNotStarted counts those. Missed is the
	// pool-hours over the target.
	PoolP90        float64 `json:"pool_p90_seconds"`
	PoolNotStarted int     `json:"pool_jobs_not_started"`
	Missed         int     `json:"missed_pool_hours"`
	Cost           float64 `json:"cost"`
}

// Suggestion is the search's result: a week plan per pool, the
// configuration that holds them, and the replay of its last round.
type Suggestion struct {
	Plans  map[string]WeekPlan `json:"-"`
	Config *config.Config      `json:"-"`
	Report Report              `json:"report"`
	Rounds []Round             `json:"rounds"`
	// Met is whether every pool-hour of the last round met the target.
	Met bool `json:"met"`
	// Capped are the pools, by name, that autoscale and whose plan wanted
	// more hot instances than their block's max in some hour: the plan
	// keeps max there, since the autoscaler never keeps more (and the
	// configuration refuses a schedule that asks for more).
	Capped map[string]Capped `json:"capped,omitempty"`
}

// Capped is how far a pool's plan wanted to go past its autoscale max.
type Capped struct {
	// Max is the block's; Wanted the most hot instances the search wanted
	// in an hour, over its rounds; Hours the hours of the week the
	// suggested plan holds at Max.
	Max    int `json:"max"`
	Wanted int `json:"wanted_hot"`
	Hours  int `json:"hours_at_max"`
}

// Suggest searches, per pool, the hot or stopped counts for each hour of
// the week (UTC) that bring the pool's jobs under the target p90.
//
// The first estimate comes from the history alone: in each pool-hour, the
// 90th percentile, over its jobs, of how many of the pool's jobs arrived
// within the time a used warm instance takes to be replaced (boot,
// warm-up and one converger cycle); with that many warm, nine jobs in ten
// find one. The kind is stopped when the target leaves time to start an
// instance (twice the start latency), hot otherwise. Each round then
// replays the history through the control plane with those schedules and
// adds capacity (a quarter more, at least one) to every pool-hour still
// over the target, until none is or the rounds run out. Pool-hours
// without jobs keep nothing; a pool that autoscales keeps at most its
// block's max hot instances in any hour (Suggestion.Capped says where it
// wanted more); pools without jobs in the history keep their schedules,
// and so do the pools of environments other than the one served (see
// Options.Environment). A search that ctx ends returns no suggestion and
// an error wrapping ctx's.
func Suggest(ctx context.Context, o SuggestOptions) (Suggestion, error) {
	if o.Config == nil {
		return Suggestion{}, errors.New("simulate: no configuration")
	}
	if o.TargetP90 <= 0 {
		return Suggestion{}, errors.New("simulate: the target p90 must be > 0")
	}
	if o.Rounds <= 0 {
		o.Rounds = 4
	}
	o.Options = o.withDefaults()
	env, err := demo.Environment(o.Config, o.Environment)
	if err != nil {
		return Suggestion{}, fmt.Errorf("simulate: %w", err)
	}
	o.Environment = env
	hot := o.TargetP90 < 2*o.Latency.Start
	plans := firstEstimate(o.Config, env, o.Jobs, replacementTime(o.Options), hot)
	var s Suggestion
	var capped capping
	capHot(o.Config, plans, &capped)
	for round := 1; ; round++ {
		cfg := withPlans(o.Config, plans)
		replay := o.Options
		replay.Config = cfg
		rep, err := Run(ctx, replay)
		if err != nil {
			// An earlier round's plans would pass for the search's
			// outcome: give none.
			return Suggestion{}, err
		}
		missed := overTarget(rep, o.TargetP90)
		r := Round{Round: round, PoolP90: rep.Waits.Pools.P90, PoolNotStarted: rep.Waits.Pools.NotStarted, Missed: len(missed), Cost: rep.Bill.Total}
		s.Rounds = append(s.Rounds, r)
		if o.OnRound != nil {
			o.OnRound(r)
		}
		s.Plans, s.Config, s.Report, s.Met, s.Capped = plans, cfg, rep, len(missed) == 0, maps.Clone(capped.pools)
		if s.Met || round > o.Rounds {
			return s, nil
		}
		plans = maps.Clone(plans)
		for _, m := range missed {
			plan := plans[m.pool]
			plan.grow(m.day, m.hour, hot)
			plans[m.pool] = plan
		}
		capHot(o.Config, plans, &capped)
	}
}

// capHot holds the planned hot instances of each pool that autoscales at
// its block's max in every hour. c records, by pool, the most a plan
// wanted and the hours held: the search only adds, so an hour held once
// stays at max.
func capHot(cfg *config.Config, plans map[string]WeekPlan, c *capping) {
	for name, plan := range plans {
		p, ok := cfg.Pool(name)
		if !ok || p.Autoscale == nil {
			continue
		}
		held := false
		for day := range plan {
			for hour := range plan[day] {
				w := &plan[day][hour]
				if w.Hot <= p.Autoscale.Max {
					continue
				}
				c.hold(name, p.Autoscale.Max, w.Hot, day, hour)
				w.Hot, held = p.Autoscale.Max, true
			}
		}
		if held {
			plans[name] = plan
		}
	}
}

// capping gathers the pools whose plans capHot held at their max.
type capping struct {
	pools map[string]Capped
	hours map[string]map[[2]int]bool
}

// hold records that pool's plan wanted wanted hot instances in the hour,
// and keeps limit.
func (c *capping) hold(pool string, limit, wanted, day, hour int) {
	if c.pools == nil {
		c.pools, c.hours = map[string]Capped{}, map[string]map[[2]int]bool{}
	}
	if c.hours[pool] == nil {
		c.hours[pool] = map[[2]int]bool{}
	}
	c.hours[pool][[2]int{day, hour}] = true
	c.pools[pool] = Capped{Max: limit, Wanted: max(c.pools[pool].Wanted, wanted), Hours: len(c.hours[pool])}
}

// withDefaults fills the zero timings and interval, for Run and for the
// search's estimate alike.
func (o Options) withDefaults() Options {
	if o.Latency == (sim.Latency{}) {
		o.Latency = demo.DefaultLatency
	}
	if o.Interval <= 0 {
		o.Interval = 30 * time.Second
	}
	return o
}

// replacementTime is how long after a warm instance is taken its
// replacement is warm: a converger cycle to notice, a boot, a warm-up.
func replacementTime(o Options) time.Duration {
	return o.Interval + o.Latency.Boot + o.Latency.WarmUp
}

// firstEstimate sizes each pool-hour of the pools env serves from the
// arrivals of the jobs env's stack takes for it: a job of another
// environment is not counted, though it names a pool every environment
// shares. Other environments' pools serve none of the replay's jobs, so
// they are left as configured.
func firstEstimate(cfg *config.Config, env string, jobs []history.Job, window time.Duration, hot bool) map[string]WeekPlan {
	arrivals := map[string][]time.Time{}
	route := router(cfg, env)
	for _, j := range jobs {
		if j.Started == nil || j.Completed == nil {
			continue
		}
		if d := route(j.Labels); d.Ours && d.Pool != "" {
			arrivals[d.Pool] = append(arrivals[d.Pool], j.Created.UTC())
		}
	}
	plans := map[string]WeekPlan{}
	for _, p := range cfg.PoolsFor(env) {
		times := arrivals[p.Name]
		if len(times) == 0 {
			continue // the history says nothing of this pool: it stays as configured
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		inWindow := map[[2]int][]int{}
		first := 0
		for i, t := range times {
			for times[first].Add(window).Before(t) || times[first].Add(window).Equal(t) {
				first++
			}
			key := [2]int{int(t.Weekday()), t.Hour()}
			inWindow[key] = append(inWindow[key], i-first+1)
		}
		var plan WeekPlan
		for key, counts := range inWindow {
			plan.set(time.Weekday(key[0]), key[1], percentile90(counts), hot)
		}
		plans[p.Name] = plan
	}
	return plans
}

func percentile90(xs []int) int {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(max(int(0.9*float64(len(s))+0.5)-1, 0), len(s)-1)]
}

// withPlans is cfg with each planned pool's schedule replaced by its plan,
// in UTC.
func withPlans(cfg *config.Config, plans map[string]WeekPlan) *config.Config {
	out := *cfg
	out.Pools = slices.Clone(cfg.Pools)
	for i, p := range out.Pools {
		plan, ok := plans[p.Name]
		if !ok {
			continue
		}
		p.Schedule, p.Timezone, p.Location = plan.Schedule(), "", time.UTC
		out.Pools[i] = p
	}
	return &out
}

type poolHour struct {
	pool string
	day  time.Weekday
	hour int
}

// overTarget lists the pool-hours whose p90 queue time exceeds target, or
// with a job that never started: however few, such a job waited longer
// than the replay let it, which no target allows.
func overTarget(rep Report, target time.Duration) []poolHour {
	var out []poolHour
	for pool, hours := range rep.Waits.ByPoolHour {
		for key, l := range hours {
			if l.P90 <= target.Seconds() && l.NotStarted == 0 {
				continue
			}
			at, err := time.Parse("Mon 15", key)
			if err != nil {
				continue
			}
			out = append(out, poolHour{pool, weekdayOf(key), at.Hour()})
		}
	}
	slices.SortFunc(out, func(a, b poolHour) int {
		return cmp.Or(cmp.Compare(a.pool, b.pool), cmp.Compare(a.day, b.day), cmp.Compare(a.hour, b.hour))
	})
	return out
}

func weekdayOf(key string) time.Weekday {
	for d := time.Sunday; d <= time.Saturday; d++ {
		if d.String()[:3] == key[:3] {
			return d
		}
	}
	return time.Sunday
}
