package simulate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/history"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

const propertyConfig = `runners:
  small:
    image: ubuntu24-full-x64
    ram: 1
    family: [t3]
pools:
  p:
    runner: small
    schedule:
      - name: default
        hot: %d
`

// generatedHistory is 30 minutes of one pool's jobs drawn from seed: single
// jobs at exponential gaps (a mean of 90 s) and now and then a matrix of
// 3 to 8 jobs at once, each running 1 to 5 minutes.
func generatedHistory(seed uint64) []history.Job {
	rng := rand.New(rand.NewPCG(seed, 99))
	start := time.Date(2026, 11, 25, 13, 0, 0, 0, time.UTC)
	var jobs []history.Job
	add := func(at time.Time) {
		id := int64(len(jobs) + 1)
		started := at.Add(3 * time.Second)
		completed := started.Add(time.Minute + time.Duration(rng.IntN(240))*time.Second)
		jobs = append(jobs, history.Job{ID: id, RunID: 900 + id, Repo: "acme/app", Name: "test",
			Labels: []string{fmt.Sprintf("runs-on=%d/pool=p", 900+id)}, Created: at,
			Started: &started, Completed: &completed, Conclusion: "success"})
	}
	for at := start; at.Before(start.Add(30 * time.Minute)); at = at.Add(time.Duration(rng.ExpFloat64() * 90 * float64(time.Second))) {
		n := 1
		if rng.IntN(6) == 0 {
			n = 3 + rng.IntN(6)
		}
		for range n {
			add(at)
		}
	}
	return jobs
}

// Adding hot capacity never makes the replay's p90 worse, for generated
// histories. Replays are deterministic, so worse by any amount fails.
func TestMoreHotCapacityNeverWorsensTheP90(t *testing.T) {
	if testing.Short() {
		t.Skip("many replays")
	}
	for seed := uint64(1); seed <= 2; seed++ {
		jobs := generatedHistory(seed)
		prev := -1.0
		for _, hot := range []int{0, 2, 8} {
			cfg, err := config.Parse("p.yml", fmt.Appendf(nil, propertyConfig, hot))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := simulate.Run(context.Background(), simulate.Options{Config: cfg, Jobs: jobs, Seed: seed,
				Tail: 6 * time.Minute}) // the longest job runs 5
			if err != nil {
				t.Fatal(err)
			}
			p90 := rep.Simulated.QueueTime.P90
			if rep.Simulated.QueueTime.Count != len(jobs) {
				t.Fatalf("history %d, hot %d: %d of %d jobs served", seed, hot, rep.Simulated.QueueTime.Count, len(jobs))
			}
			if prev >= 0 && p90 > prev {
				t.Errorf("history %d (%d jobs): hot %d gives p90 %.1f s, worse than %.1f s with less", seed, len(jobs), hot, p90, prev)
			}
			t.Logf("history %d (%d jobs), hot %d: p90 %.1f s", seed, len(jobs), hot, p90)
			prev = p90
		}
	}
}
