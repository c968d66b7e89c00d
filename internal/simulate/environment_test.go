package simulate_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/history"
	"github.com/bullpen-ci/bullpen/internal/simulate"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

// A replay serves the environment it is given, says which, and names the
// pools it leaves out; by default it serves the first pool's.
func TestAReplayServesTheEnvironmentItIsGiven(t *testing.T) {
	jobs := sixEach("a", "dev", "b", "prod")
	for env, want := range map[string]struct{ served, other string }{"": {"a", "b@prod"}, "prod": {"b", "a@dev"}} {
		rep, err := simulate.Run(context.Background(), simulate.Options{Config: testfixtures.TwoEnvironments(t), Environment: env, Jobs: jobs, Seed: 3, Tail: 3 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		wantEnv := map[string]string{"": "dev", "prod": "prod"}[env]
		if rep.Environment != wantEnv || !slices.Equal(rep.OtherPools, []string{want.other}) {
			t.Errorf("environment %q: report says %q, other pools %v", env, rep.Environment, rep.OtherPools)
		}
		if l := rep.Simulated.ByPool[want.served]; l.Count != 6 || len(rep.Simulated.ByPool) != 1 {
			t.Errorf("environment %q: jobs by pool %+v, want pool %s's 6", env, rep.Simulated.ByPool, want.served)
		}
	}
}

// The search plans only the pools of the environment served: the others
// serve none of the replay's jobs, so they keep their schedules.
func TestSuggestPlansOnlyTheEnvironmentServed(t *testing.T) {
	if testing.Short() {
		t.Skip("a replay")
	}
	jobs := sixEach("a", "dev", "b", "prod")
	s := suggestOneRound(t, "prod", jobs)
	if _, ok := s.Plans["a"]; ok || len(s.Plans) != 1 {
		t.Errorf("plans for %d pools, a's planned %v: want b's only", len(s.Plans), ok)
	}
	noneShared := testfixtures.TwoEnvironments(t)
	noneShared.Pools = slices.DeleteFunc(noneShared.Pools, func(p domain.Pool) bool { return p.Environment == "" })
	if _, err := simulate.Run(context.Background(), simulate.Options{Config: noneShared, Environment: "staging", Jobs: jobs}); err == nil ||
		!strings.Contains(err.Error(), `environment "staging"`) {
		t.Errorf("an environment no pool belongs to: %v", err)
	}
}

// The first estimate counts only the jobs the served environment's stack
// takes: another environment's jobs for a pool every environment shares
// give it no plan.
func TestSuggestCountsOnlyTheServedEnvironmentsJobs(t *testing.T) {
	s := suggestOneRound(t, "dev", sixEach("a", "dev", "shared", "prod"))
	if _, ok := s.Plans["shared"]; ok || len(s.Plans) != 1 {
		t.Errorf("plans for %d pools, shared planned %v: want a's only, prod's jobs for shared left to prod", len(s.Plans), ok)
	}
}

// A generated history's jobs carry the env= label their environment's
// stack takes, none for production's.
func TestAGeneratedHistoryIsForItsEnvironment(t *testing.T) {
	for env, want := range map[string]string{"dev": "/env=dev", "production": "", "": ""} {
		jobs := simulate.Generate(simulate.Workload{Jobs: 30, Days: 0.25, Pools: []string{"a", "shared"}, Environment: env, Seed: 2,
			Start: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)})
		for _, j := range jobs {
			if len(j.Labels) != 1 || !strings.HasSuffix(j.Labels[0], want) || (want == "" && strings.Contains(j.Labels[0], "env=")) {
				t.Fatalf("environment %q: a job labelled %q", env, j.Labels)
			}
		}
	}
	jobs := simulate.Generate(simulate.Workload{Jobs: 30, Days: 0.25, Pools: []string{"a", "shared"}, Environment: "dev", Seed: 2,
		Start: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)})
	rep, err := simulate.Run(context.Background(), simulate.Options{Config: testfixtures.TwoEnvironments(t), Jobs: jobs, Seed: 2, Tail: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Replayed != len(jobs) || rep.NotForBullpen != 0 {
		t.Errorf("%d of %d generated jobs replayed by dev's stack, %d not for bullpen", rep.Replayed, len(jobs), rep.NotForBullpen)
	}
}

// sixEach is six jobs of pool a in environment envA and six of pool b in
// envB, each with an id of its own.
func sixEach(a, envA, b, envB string) []history.Job {
	jobs := append(burst(a, envA)[:6], burst(b, envB)[:6]...)
	for i := range jobs[6:] {
		jobs[6+i].ID += 1000
	}
	return jobs
}

// suggestOneRound runs one round of the search over jobs on the two
// environments' configuration, serving environment.
func suggestOneRound(t *testing.T, environment string, jobs []history.Job) simulate.Suggestion {
	t.Helper()
	s, err := simulate.Suggest(context.Background(), simulate.SuggestOptions{
		Options:   simulate.Options{Config: testfixtures.TwoEnvironments(t), Environment: environment, Jobs: jobs, Seed: 3, Tail: 3 * time.Minute},
		TargetP90: time.Minute, Rounds: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
