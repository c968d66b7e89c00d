package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/demo"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

// suggestSchedules replays the history through the configuration as
// given, then searches schedules that meet the target. The configuration
// with the suggested schedules goes to stdout (as JSON with the rounds
// under --json); the rounds and the comparison go to stderr.
func suggestSchedules(ctx context.Context, e *env, cfgPath string, o simulate.SuggestOptions, asJSON bool, fail func(error) int) int {
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		return fail(err)
	}
	given, err := simulate.Run(ctx, o.Options)
	if o.Progress != nil {
		fmt.Fprintln(e.stderr)
	}
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(e.stderr, "as configured: pool jobs' p90 %s, cost %.2f\n", poolP90(given.Waits.Pools), given.Bill.Total)
	o.OnRound = func(r simulate.Round) {
		if o.Progress != nil {
			fmt.Fprintln(e.stderr)
		}
		fmt.Fprintf(e.stderr, "round %d: pool jobs' p90 %s, %d pool-hours over %s, cost %.2f\n", r.Round,
			poolP90(simulate.Waited{Latencies: demo.Latencies{P90: r.PoolP90}, NotStarted: r.PoolNotStarted}), r.Missed, o.TargetP90, r.Cost)
	}
	s, err := simulate.Suggest(ctx, o)
	if err != nil {
		return fail(err)
	}
	schedules := map[string][]domain.ScheduleEntry{}
	for pool, plan := range s.Plans {
		schedules[pool] = plan.Schedule()
	}
	for _, p := range o.Config.Pools {
		switch _, ok := s.Plans[p.Name]; {
		case ok:
		case !config.ServedIn(p, s.Report.Environment):
			fmt.Fprintf(e.stderr, "pool %s: of another environment than %s; its schedule is kept\n", p.Name, s.Report.Environment)
		default:
			fmt.Fprintf(e.stderr, "pool %s: no job of the history went to it; its schedule is kept\n", p.Name)
		}
	}
	out, err := config.WithSchedules(cfgPath, data, schedules)
	if err != nil {
		return fail(err)
	}
	if !s.Met {
		fmt.Fprintf(e.stderr, "the target is not met after %d rounds: these are the last round's schedules; try more --rounds\n", len(s.Rounds))
	}
	capped := cappedLines(s.Capped)
	if line := fewerFromPools(given, s.Report); line != "" {
		capped = append(capped, line)
	}
	for _, line := range capped {
		fmt.Fprintln(e.stderr, line)
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			simulate.Suggestion
			Given         simulate.Report `json:"as_configured"`
			Configuration string          `json:"configuration"`
		}{s, given, string(out)}); err != nil {
			return fail(err)
		}
		return 0
	}
	fmt.Fprintf(e.stdout, "# bullpen simulate --suggest --target-p90 %s, from %d jobs of %s to %s.\n", o.TargetP90, s.Report.Replayed,
		s.Report.From.Format("2006-01-02"), s.Report.To.Format("2006-01-02"))
	fmt.Fprintf(e.stdout, "# Pool jobs' p90 %s, estimated cost %.2f (as configured: %s, %.2f). Schedules in UTC.\n",
		poolP90(s.Report.Waits.Pools), s.Report.Bill.Total, poolP90(given.Waits.Pools), given.Bill.Total)
	for _, line := range capped {
		fmt.Fprintln(e.stdout, "# "+strings.ToUpper(line[:1])+line[1:]+".")
	}
	fmt.Fprint(e.stdout, strings.TrimLeft(string(out), "\n"))
	return 0
}

// poolP90 writes the p90 queue time of every pool job, those the pools'
// members served and those that overflowed to cold starts, with how many
// did not start: they count as waiting until the replay's end.
func poolP90(w simulate.Waited) string {
	if w.NotStarted == 0 {
		return fmt.Sprintf("%.1f s", w.P90)
	}
	return fmt.Sprintf("%.1f s or more (%d did not start and count as waiting until the replay's end)", w.P90, w.NotStarted)
}

// fewerFromPools warns when the suggested schedules serve fewer jobs from
// the pools' warm instances than the configuration as given: the headline
// p90 alone would hide that more jobs start cold.
func fewerFromPools(given, suggested simulate.Report) string {
	was, now := given.Simulated.QueueTimes["pool"].Count, suggested.Simulated.QueueTimes["pool"].Count
	if now >= was {
		return ""
	}
	return fmt.Sprintf("warning: the suggested schedules serve %d jobs from the pools' warm instances, where the configuration as given serves %d", now, was)
}

// cappedLines says, for each pool whose plan wanted more hot instances
// than its autoscale block's max, how many, and what to raise max to.
func cappedLines(capped map[string]simulate.Capped) []string {
	var out []string
	for _, pool := range sortedKeys(capped) {
		c := capped[pool]
		out = append(out, fmt.Sprintf("pool %s: the plan wanted up to %d hot instances, above its autoscale block's max %d, "+
			"so %d hours of the week keep %d; raise max to %d and search again to plan them", pool, c.Wanted, c.Max, c.Hours, c.Max, c.Wanted))
	}
	return out
}
