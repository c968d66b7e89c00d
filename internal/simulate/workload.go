package simulate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/history"
	"github.com/bullpen-ci/bullpen/internal/intake"
)

// Workload sizes a generated history: Jobs over Days (a fraction counts
// whole hours) from Start, spread over Pools, the first the busiest.
// Environment is the environment whose stack the jobs are for: a stack
// takes only the jobs of its own environment, and a job without env= is
// production's, so the jobs of any other carry env=NAME.
type Workload struct {
	Jobs        int
	Days        float64
	Pools       []string
	Environment string
	Seed        uint64
	Start       time.Time
}

// WorkloadPools names n pools as WorkloadConfig does: pool-1 … pool-N.
func WorkloadPools(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("pool-", i+1)
	}
	return names
}

// hourWeight is how busy an hour of the week is (UTC): working hours on
// weekdays carry most jobs, evenings some, nights and weekends few.
func hourWeight(day time.Weekday, hour int) float64 {
	weekend := day == time.Saturday || day == time.Sunday
	switch {
	case weekend:
		return 1
	case hour >= 8 && hour < 18:
		return 12
	case hour >= 18 && hour < 22:
		return 4
	}
	return 1
}

// Generate draws a history: arrivals follow the hours' weights; one in
// five arrivals is a matrix of 3 to 12 jobs queued at once; pools are
// picked with falling weights (the first busiest); run times are a minute
// plus an exponential of mean 5 minutes, at most 30. The same workload
// gives the same history, whatever its environment.
func Generate(w Workload) []history.Job {
	rng := rand.New(rand.NewPCG(w.Seed, 0x5eed))
	hours := max(int(math.Ceil(w.Days*24)), 1)
	weights := make([]float64, hours)
	total := 0.0
	for h := range hours {
		at := w.Start.Add(time.Duration(h) * time.Hour)
		weights[h] = hourWeight(at.Weekday(), at.Hour())
		total += weights[h]
	}
	pickHour := func() int {
		x := rng.Float64() * total
		for h, wt := range weights {
			if x < wt {
				return h
			}
			x -= wt
		}
		return hours - 1
	}
	suffix := ""
	if env := intake.EnvLabel(w.Environment); env != "" {
		suffix = "/env=" + env
	}
	var jobs []history.Job
	for len(jobs) < w.Jobs {
		at := w.Start.Add(time.Duration(pickHour())*time.Hour + time.Duration(rng.IntN(3600))*time.Second)
		n := 1
		if rng.IntN(5) == 0 {
			n = 3 + rng.IntN(10)
		}
		pool := w.Pools[min(int(rng.ExpFloat64()*float64(len(w.Pools))/3), len(w.Pools)-1)]
		run := int64(len(jobs) + 1_000_000)
		for range min(n, w.Jobs-len(jobs)) {
			id := int64(len(jobs) + 1)
			started := at.Add(2 * time.Second)
			took := (time.Minute + min(time.Duration(rng.ExpFloat64()*float64(5*time.Minute)), 29*time.Minute)).Round(time.Second)
			completed := started.Add(took)
			jobs = append(jobs, history.Job{ID: id, RunID: run, RunAttempt: 1, Repo: "acme/app", Workflow: "ci", Name: fmt.Sprint("job-", id),
				Labels: []string{fmt.Sprintf("runs-on=%d/pool=%s%s", run, pool, suffix)}, Created: at,
				Started: &started, Completed: &completed, Conclusion: "success"})
		}
	}
	slices.SortStableFunc(jobs, func(a, b history.Job) int { return a.Created.Compare(b.Created) })
	return jobs
}

// WorkloadConfig is a configuration for a workload's pools: each keeps
// two hot and two stopped instances in working hours on weekdays and one
// stopped otherwise.
func WorkloadConfig(pools int) string {
	var b strings.Builder
	b.WriteString("runners:\n  small:\n    image: ubuntu24-full-x64\n    ram: 1\n    family: [t3]\n  large:\n    image: ubuntu24-full-x64\n    cpu: 4\n    family: [m7a]\npools:\n")
	for i := 1; i <= pools; i++ {
		runner := "small"
		if i%2 == 0 {
			runner = "large"
		}
		fmt.Fprintf(&b, `  pool-%d:
    runner: %s
    schedule:
      - name: default
        stopped: 1
      - name: working-hours
        match:
          day: [monday, tuesday, wednesday, thursday, friday]
          time: ["08:00", "18:00"]
        hot: 2
        stopped: 2
`, i, runner)
	}
	return b.String()
}
