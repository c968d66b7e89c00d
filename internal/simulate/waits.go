package simulate

import (
	"time"

	"github.com/bullpen-ci/bullpen/internal/demo"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/intake"
)

// Waits are the queue times of bullpen's jobs in a replay, the jobs no
// runner took by its end among them: each of those counts as waiting
// until the end, so that a configuration leaving jobs queued does not
// read as fast. The figures of a group with such jobs are lower bounds.
// Jobs bullpen rejects (Report.Simulated.Unserved) are not counted.
type Waits struct {
	All Waited `json:"all"`
	// Pools is every pool job's, however it was served: by a member, by
	// an instance back from a job, or cold when the pool had none warm.
	Pools Waited `json:"pools"`
	// ByPool is by pool, ByHour by the hour of the week a job was queued
	// in ("Mon 09", UTC), ByPoolHour by both.
	ByPool     map[string]Waited            `json:"by_pool,omitempty"`
	ByHour     map[string]Waited            `json:"by_hour,omitempty"`
	ByPoolHour map[string]map[string]Waited `json:"by_pool_and_hour,omitempty"`
}

// Waited are the percentiles of a group's queue times, and how many of
// its jobs did not start: Count includes them.
type Waited struct {
	demo.Latencies
	NotStarted int `json:"not_started"`
}

// waitGroup gathers one group's queue times in seconds.
type waitGroup struct {
	seconds    []float64
	notStarted int
}

func (g *waitGroup) add(wait time.Duration, started bool) {
	g.seconds = append(g.seconds, wait.Seconds())
	if !started {
		g.notStarted++
	}
}

func (g *waitGroup) waited() Waited {
	if len(g.seconds) == 0 {
		return Waited{}
	}
	return Waited{Latencies: demo.LatenciesOf(g.seconds), NotStarted: g.notStarted}
}

// waitsOf reads the queue times of bullpen's jobs, their re-runs
// included, off the simulated GitHub's record of a replay that ended at
// end. A job that completed without starting was cancelled: it waited for
// nothing.
func waitsOf(stream []ghsim.JobRecord, route func(labels []string) intake.Decision, end time.Time) Waits {
	var all, pools waitGroup
	byPool, byHour := map[string]*waitGroup{}, map[string]*waitGroup{}
	byPoolHour := map[string]map[string]*waitGroup{}
	group := func(m map[string]*waitGroup, key string) *waitGroup {
		if m[key] == nil {
			m[key] = &waitGroup{}
		}
		return m[key]
	}
	for _, r := range stream {
		d := route(r.Labels)
		if !d.Ours || d.Reject != "" {
			continue
		}
		started := !r.StartedAt.IsZero()
		if !started && !r.CompletedAt.IsZero() {
			continue
		}
		wait := end.Sub(r.CreatedAt)
		if started {
			wait = r.StartedAt.Sub(r.CreatedAt)
		}
		wait = max(wait, 0)
		hour := r.CreatedAt.UTC().Format("Mon 15")
		all.add(wait, started)
		group(byHour, hour).add(wait, started)
		if d.Pool == "" {
			continue
		}
		pools.add(wait, started)
		group(byPool, d.Pool).add(wait, started)
		if byPoolHour[d.Pool] == nil {
			byPoolHour[d.Pool] = map[string]*waitGroup{}
		}
		group(byPoolHour[d.Pool], hour).add(wait, started)
	}
	w := Waits{All: all.waited(), Pools: pools.waited(), ByPool: summed(byPool), ByHour: summed(byHour)}
	for pool, hours := range byPoolHour {
		if w.ByPoolHour == nil {
			w.ByPoolHour = map[string]map[string]Waited{}
		}
		w.ByPoolHour[pool] = summed(hours)
	}
	return w
}

func summed(groups map[string]*waitGroup) map[string]Waited {
	if len(groups) == 0 {
		return nil
	}
	out := make(map[string]Waited, len(groups))
	for key, g := range groups {
		out[key] = g.waited()
	}
	return out
}
