package sim_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/github/sim"
)

var demoMix = []sim.LabelChoice{
	{Labels: []string{"runs-on=" + sim.RunIDExpr + "/pool=small"}, Repo: "acme/app", Weight: 3},
	{Labels: []string{"runs-on=" + sim.RunIDExpr + "/cpu=8"}, Repo: "acme/web", Weight: 1},
}

// generate runs a generator for span, advancing the virtual clock by step,
// and returns the jobs as lines that name everything that must repeat.
func generate(t *testing.T, seed uint64, span, step time.Duration) []string {
	t.Helper()
	e := newEnv(t, sim.Options{})
	gen := sim.NewGenerator(e.gh, e.clk, sim.GeneratorOptions{
		Seed: seed, PerMinute: 6, Mix: demoMix, MinDuration: time.Minute, MaxDuration: 10 * time.Minute,
	})
	gen.Start()
	for elapsed := time.Duration(0); elapsed < span; elapsed += step {
		e.advance(step)
	}
	gen.Stop()
	var out []string
	for _, j := range e.gh.Jobs() {
		out = append(out, fmt.Sprintf("%d run %d %s %q at %s for %s",
			j.ID, j.RunID, j.Repo, j.Labels, j.CreatedAt.Sub(epoch), j.Duration))
	}
	return out
}

func TestGeneratorIsDeterministicUnderTheVirtualClock(t *testing.T) {
	fine := generate(t, 42, time.Hour, time.Second)
	coarse := generate(t, 42, time.Hour, 7*time.Minute)
	if len(fine) == 0 || !slices.Equal(fine, coarse[:min(len(fine), len(coarse))]) {
		t.Fatalf("same seed, different clock steps:\n%s\nvs\n%s", strings.Join(fine, "\n"), strings.Join(coarse, "\n"))
	}
	if again := generate(t, 42, time.Hour, time.Second); !slices.Equal(fine, again) {
		t.Errorf("same seed, same steps, different jobs")
	}
	if other := generate(t, 43, time.Hour, time.Second); slices.Equal(fine, other) {
		t.Errorf("seeds 42 and 43 made the same jobs")
	}
}

func TestGeneratorRateMixAndDurations(t *testing.T) {
	e := newEnv(t, sim.Options{})
	gen := sim.NewGenerator(e.gh, e.clk, sim.GeneratorOptions{
		Seed: 1, PerMinute: 10, Mix: demoMix, MinDuration: time.Minute, MaxDuration: 3 * time.Minute,
	})
	gen.Start()
	gen.Start() // a second Start changes nothing
	for range 600 {
		e.advance(time.Minute)
	}
	gen.Stop()
	jobs := e.gh.Jobs()
	// 6,000 expected; a Poisson count's standard deviation is about 77.
	if n := len(jobs); n < 5600 || n > 6400 {
		t.Errorf("%d jobs in 10 hours at 10 a minute", n)
	}
	small := 0
	for _, j := range jobs {
		if j.Duration < time.Minute || j.Duration > 3*time.Minute {
			t.Fatalf("job %d lasts %s, outside [1m, 3m]", j.ID, j.Duration)
		}
		want := fmt.Sprintf("runs-on=%d/", j.RunID)
		if len(j.Labels) != 1 || !strings.HasPrefix(j.Labels[0], want) {
			t.Fatalf("job %d labels %q do not carry its run id", j.ID, j.Labels)
		}
		if j.Repo == "acme/app" {
			small++
		}
	}
	if share := float64(small) / float64(len(jobs)); share < 0.70 || share > 0.80 {
		t.Errorf("weight 3 of 4 got a share of %.2f", share)
	}
}

func TestGeneratorStops(t *testing.T) {
	e := newEnv(t, sim.Options{})
	gen := sim.NewGenerator(e.gh, e.clk, sim.GeneratorOptions{Seed: 1, PerMinute: 60})
	gen.Start()
	e.advance(time.Minute)
	gen.Stop()
	n := len(e.gh.Jobs())
	e.advance(time.Hour)
	if got := len(e.gh.Jobs()); got != n || n == 0 {
		t.Errorf("%d jobs before Stop, %d an hour later", n, got)
	}
	if p := e.clk.Pending(); p != 0 {
		t.Errorf("%d timers left after Stop", p)
	}
}

func TestBurstQueuesAtOnce(t *testing.T) {
	e := newEnv(t, sim.Options{})
	gen := sim.NewGenerator(e.gh, e.clk, sim.GeneratorOptions{Seed: 1, Mix: demoMix, MinDuration: time.Minute})
	e.advance(time.Minute)
	filled := gen.Burst(100, sim.JobSpec{})
	given := gen.Burst(3, sim.JobSpec{Repo: "acme/ops", Labels: []string{"gpu"}, Duration: time.Hour})
	if len(filled) != 100 || len(given) != 3 {
		t.Fatalf("burst sizes %d and %d", len(filled), len(given))
	}
	for _, j := range append(filled, given...) {
		if !j.CreatedAt.Equal(epoch.Add(time.Minute)) || j.Status != sim.StatusQueued {
			t.Errorf("job %d queued %s at %v", j.ID, j.Status, j.CreatedAt)
		}
	}
	for _, j := range given {
		r := e.job(j.ID)
		if r.Repo != "acme/ops" || !slices.Equal(r.Labels, []string{"gpu"}) || r.Duration != time.Hour {
			t.Errorf("a given spec was not honoured: %+v", r)
		}
	}
	if got := len(e.rec.all()); got != 103 {
		t.Errorf("%d queued webhooks, want 103", got)
	}
	jobs, err := e.gh.QueuedJobs(t.Context(), org)
	if err != nil || len(jobs) != 103 {
		t.Errorf("QueuedJobs: %d jobs, %v", len(jobs), err)
	}
}
