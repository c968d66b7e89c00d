package simulate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/history"
	"github.com/bullpen-ci/bullpen/internal/intake"
	"github.com/bullpen-ci/bullpen/internal/schedule"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

// A week plan written as schedule entries, and those written into the
// configuration file, give back the plan at every hour of the week.
func TestWeekPlanRoundTripsThroughTheConfiguration(t *testing.T) {
	var plan simulate.WeekPlan
	rng := rand.New(rand.NewPCG(1, 2))
	for day := range plan {
		for hour := range plan[day] {
			switch {
			case hour >= 8 && hour < 18 && day >= 1 && day <= 5:
				plan[day][hour] = simulate.Warm{Hot: 2 + rng.IntN(2), Stopped: 1}
			case hour == 23:
				plan[day][hour] = simulate.Warm{Stopped: 3}
			}
		}
	}
	out, err := config.WithSchedules("runs-on.yml", exampleData(t), map[string][]domain.ScheduleEntry{"small-x64": plan.Schedule()})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("suggested.yml", out)
	if err != nil {
		t.Fatalf("the rewritten file does not parse: %v\n%s", err, out)
	}
	pool, _ := cfg.Pool("small-x64")
	if pool.Timezone != "" {
		t.Errorf("the planned pool keeps its time zone %q; the plan is in UTC", pool.Timezone)
	}
	monday := time.Date(2026, 11, 23, 0, 30, 0, 0, time.UTC)
	for h := range 7 * 24 {
		at := monday.Add(time.Duration(h) * time.Hour)
		want := plan[at.Weekday()][at.Hour()]
		if got := schedule.Resolve(pool, at).Target; got.Hot != want.Hot || got.Stopped != want.Stopped {
			t.Fatalf("%s: the schedule keeps %+v, the plan %+v", at.Format("Mon 15:04"), got, want)
		}
	}
	if other, _ := cfg.Pool("medium-x64"); other.Timezone != "America/New_York" {
		t.Error("a pool without a plan changed")
	}
}

// burst is a history of pool jobs for environment env's stack (env=
// labels them as intake.EnvLabel says): a quiet hour of one job every ten
// minutes, then half an hour with a job every 20 s, each running two
// minutes.
func burst(pool, env string) []history.Job {
	suffix := ""
	if label := intake.EnvLabel(env); label != "" {
		suffix = "/env=" + label
	}
	start := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	var jobs []history.Job
	add := func(at time.Time) {
		id := int64(len(jobs) + 1)
		started, completed := at.Add(5*time.Second), at.Add(125*time.Second)
		jobs = append(jobs, history.Job{ID: id, RunID: 100 + id, Repo: "acme/app", Name: "test",
			Labels: []string{fmt.Sprintf("runs-on=%d/pool=%s%s", 100+id, pool, suffix)}, Created: at,
			Started: &started, Completed: &completed, Conclusion: "success"})
	}
	for m := 0; m < 60; m += 10 {
		add(start.Add(time.Duration(m) * time.Minute))
	}
	for s := 0; s < 1800; s += 20 {
		add(start.Add(time.Hour + time.Duration(s)*time.Second))
	}
	return jobs
}

// The search sizes the busy hour larger than the quiet one, keeps nothing
// where no job came, and its rounds bring the pool's p90 down to the
// target.
func TestSuggestMeetsATargetWithMoreCapacityWhereJobsAre(t *testing.T) {
	if testing.Short() {
		t.Skip("several replays")
	}
	cfg := example(t)
	var rounds []simulate.Round
	s, err := simulate.Suggest(context.Background(), simulate.SuggestOptions{
		Options:   simulate.Options{Config: cfg, Jobs: burst("small-x64", "dev"), Seed: 3, Tail: 3 * time.Minute},
		TargetP90: 8 * time.Second, Rounds: 3,
		OnRound: func(r simulate.Round) { rounds = append(rounds, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	plan := s.Plans["small-x64"]
	quiet, busy := plan[time.Tuesday][9], plan[time.Tuesday][10]
	if busy.Hot <= quiet.Hot || quiet.Hot < 1 {
		t.Errorf("quiet hour %+v, busy hour %+v: want hot instances in both, more in the busy one", quiet, busy)
	}
	if plan[time.Tuesday][3] != (simulate.Warm{}) || plan[time.Saturday][10] != (simulate.Warm{}) {
		t.Error("hours without jobs keep instances")
	}
	if len(rounds) == 0 || len(rounds) != len(s.Rounds) {
		t.Fatalf("told of %d rounds, reported %d", len(rounds), len(s.Rounds))
	}
	first, last := s.Rounds[0], s.Rounds[len(s.Rounds)-1]
	t.Logf("rounds: %+v", s.Rounds)
	if !s.Met && last.Missed >= first.Missed {
		t.Errorf("the rounds did not help: %+v", s.Rounds)
	}
	if s.Met && last.Missed != 0 {
		t.Errorf("met with %d pool-hours over the target", last.Missed)
	}
	if _, err := config.WithSchedules("runs-on.yml", exampleData(t),
		map[string][]domain.ScheduleEntry{"small-x64": plan.Schedule()}); err != nil {
		t.Fatalf("the suggestion does not make a valid configuration: %v", err)
	}
}

// A target that leaves time to start a stopped instance is met with
// stopped instances, which cost only their disks while they wait.
func TestSuggestUsesStoppedInstancesWhenTheTargetAllows(t *testing.T) {
	if testing.Short() {
		t.Skip("several replays")
	}
	s, err := simulate.Suggest(context.Background(), simulate.SuggestOptions{
		Options:   simulate.Options{Config: example(t), Jobs: burst("small-x64", "dev"), Seed: 3, Tail: 3 * time.Minute},
		TargetP90: 40 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rounds: %+v", s.Rounds)
	busy := s.Plans["small-x64"][time.Tuesday][10]
	if busy.Hot != 0 || busy.Stopped == 0 || !s.Met {
		t.Errorf("busy hour %+v, met %v: want stopped instances only, meeting the target", busy, s.Met)
	}
}

// autoscaledPool is propertyConfig's pool at hot 1, autoscaling up to 2.
var autoscaledPool = fmt.Sprintf(propertyConfig, 1) + "    autoscale:\n      max: 2\n"

// A pool that autoscales is planned no more hot instances than its block's
// max, which the configuration refuses a schedule above; the suggestion
// says how many the plan wanted.
func TestSuggestKeepsHotWithinTheAutoscaleMax(t *testing.T) {
	cfg, err := config.Parse("p.yml", []byte(autoscaledPool))
	if err != nil {
		t.Fatal(err)
	}
	s, err := simulate.Suggest(context.Background(), simulate.SuggestOptions{
		Options:   simulate.Options{Config: cfg, Jobs: burst("p", ""), Seed: 3, Tail: 3 * time.Minute},
		TargetP90: time.Millisecond, Rounds: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	plan := s.Plans["p"]
	for day := range plan {
		for hour, w := range plan[day] {
			if w.Hot > 2 {
				t.Fatalf("%s %02d:00: %d hot planned, above the block's max 2", time.Weekday(day), hour, w.Hot)
			}
		}
	}
	if c := s.Capped["p"]; c.Max != 2 || c.Wanted <= 2 || c.Hours == 0 || len(s.Capped) != 1 {
		t.Errorf("capped %+v: want p's, its max 2 and the more the plan wanted", s.Capped)
	}
	if plan[time.Tuesday][10].Hot != 2 {
		t.Errorf("the busy hour keeps %+v, want the max", plan[time.Tuesday][10])
	}
	if _, err := config.WithSchedules("p.yml", []byte(autoscaledPool), map[string][]domain.ScheduleEntry{"p": plan.Schedule()}); err != nil {
		t.Fatalf("the suggestion does not make a valid configuration: %v", err)
	}
}
