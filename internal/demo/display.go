package demo

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/rebalance"
)

// Header introduces the per-cycle table: the environment served and its
// pools, and the pools of other environments left out.
func Header(w io.Writer, o Options) {
	if w == nil {
		return
	}
	pace := "as fast as the simulation settles"
	if o.Speed > 0 {
		pace = fmt.Sprintf("%g× real time", o.Speed)
	}
	// Run refuses an environment no pool belongs to; the header names it
	// all the same.
	env, _ := Environment(o.Config, o.Environment)
	if env == "" {
		env = o.Environment
	}
	pools := "pools"
	if n := len(o.Config.PoolsFor(env)); n == 1 {
		pools = "pool"
	}
	fmt.Fprintf(w, "bullpen demo: environment %s, %d %s on the simulated cloud, %s, for %s of virtual time\n",
		env, len(o.Config.PoolsFor(env)), pools, pace, o.Duration)
	if others := OtherPools(o.Config, env); len(others) > 0 {
		fmt.Fprintf(w, "not served here (pools of other environments): %s\n", strings.Join(others, ", "))
	}
	if warning := environmentWarning(o.Config, env); warning != "" {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
	if o.JobsPerMinute > 0 {
		fmt.Fprintf(w, "simulated GitHub queues about %g jobs a minute: pool jobs, runner= jobs (reuse or a new instance), ad-hoc specs\n", o.JobsPerMinute)
	}
	fmt.Fprintf(w, "virtual start %s; one line per pool every %s cycle\n\n",
		o.Start.Format(time.RFC3339), o.Interval)
	fmt.Fprintf(w, "  %-7s %-14s %-17s %-9s %-9s %-8s %s\n", "time", "pool", "schedule", "hot", "stopped", "warming", "this cycle")
}

// printCycle writes one line per pool: elapsed virtual time, schedule entry,
// ready hot and parked stopped instances against their targets, instances
// still warming, and what the cycle did.
func printCycle(w io.Writer, start time.Time, r converger.Report, jobs string) {
	if w == nil {
		return
	}
	defer func() {
		if jobs != "" {
			fmt.Fprintf(w, "  %-7s %s\n", "", jobs)
		}
	}()
	el := r.At.Sub(start).Round(time.Second)
	stamp := fmt.Sprintf("+%02d:%02d", int(el.Minutes()), int(el.Seconds())%60)
	for i, p := range r.Pools {
		if i == 1 {
			stamp = "" // the time heads its cycle's block
		}
		mark := " "
		if p.Counts.ReadyHot == p.Target.Hot && p.Counts.Stopped == p.Target.Stopped && p.Counts.Warming == 0 && p.Plan.Empty() {
			mark = "✓"
		}
		sched := p.Schedule
		if sched == "" {
			sched = "(none)"
		}
		what := describe(p.Plan)
		if p.Err != nil {
			what += "  ! " + p.Err.Error()
		}
		fmt.Fprintf(w, "%s %-7s %-14s %-17s %-9s %-9s %-8d %s\n", mark, stamp, p.Pool, sched,
			fmt.Sprintf("%d/%d", p.Counts.ReadyHot, p.Target.Hot),
			fmt.Sprintf("%d/%d", p.Counts.Stopped, p.Target.Stopped),
			p.Counts.Warming, what)
	}
}

// describe says what a plan does in words an operator reads at a glance.
func describe(p rebalance.Plan) string {
	if p.Empty() {
		return "-"
	}
	var parts []string
	for _, st := range p.Steps {
		switch st.Action {
		case rebalance.Create:
			parts = append(parts, fmt.Sprintf("create %d %s", st.Count, st.Role))
		case rebalance.Stop:
			parts = append(parts, fmt.Sprintf("stop %d (%s)", len(st.Instances), st.Reason))
		case rebalance.Settle:
			parts = append(parts, fmt.Sprintf("%d parked", len(st.Instances)))
		default:
			parts = append(parts, fmt.Sprintf("%s %d (%s)", st.Action, len(st.Instances), st.Reason))
		}
	}
	return strings.Join(parts, ", ")
}

// Summary closes a human-readable run.
func Summary(w io.Writer, r Result) {
	fmt.Fprintf(w, "\nafter %s of virtual time (%d cycles):\n", r.Virtual, r.Cycles)
	for _, p := range r.Pools {
		state := "at target"
		if !p.AtTarget {
			state = "not at target yet"
		}
		fmt.Fprintf(w, "  %-14s %-17s hot %d/%d  stopped %d/%d  warming %d  serving jobs %d%s  — %s\n", p.Name, p.Schedule,
			p.ReadyHot, p.Target.Hot, p.Stopped, p.Target.Stopped, p.Warming, p.Detached, otherCount(p), state)
	}
	ops := make([]string, 0, len(r.CloudCalls))
	for op := range r.CloudCalls {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for i, op := range ops {
		ops[i] = fmt.Sprintf("%s %d", op, r.CloudCalls[op])
	}
	fmt.Fprintf(w, "cloud API calls: %s\n", strings.Join(ops, ", "))
	if r.Jobs.Total > 0 {
		fmt.Fprintf(w, "\njobs: %d fed; queue time (queued → started) by how they were served:\n", r.Jobs.Total)
		for _, l := range queueTimeSummary(r.Jobs) {
			fmt.Fprintln(w, l)
		}
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintln(w)
	}
	for _, warning := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
}

// otherCount is "  other N (state)" for a pool with members stopping,
// terminating or in error, which keep it from its target whatever its
// ready and stopped counts say; "" for none.
func otherCount(p PoolResult) string {
	if p.Other == 0 {
		return ""
	}
	states := slices.Sorted(maps.Keys(p.OtherStates))
	switch len(states) {
	case 0:
		return fmt.Sprintf("  other %d", p.Other)
	case 1:
		return fmt.Sprintf("  other %d (%s)", p.Other, states[0])
	}
	for i, st := range states {
		states[i] = fmt.Sprintf("%d %s", p.OtherStates[st], st)
	}
	return fmt.Sprintf("  other %d (%s)", p.Other, strings.Join(states, ", "))
}
