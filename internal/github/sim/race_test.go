package sim_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/sim"
)

// TestConcurrentUse drives the sim from many goroutines at once (run it
// with -race): jobs queued, runners registered, started, listed, deleted
// and runs cancelled while the clock moves. No job may run on two runners,
// no runner may run two jobs, and every job's webhooks must arrive in its
// lifecycle's order.
func TestConcurrentUse(t *testing.T) {
	e := newEnv(t, sim.Options{Seed: 3})
	c := &crowd{e: e, starts: map[int64][]string{}, perRunner: map[string]int{}}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(c.queueJobs)
		wg.Go(func() { c.runRunners(w) })
		wg.Go(c.watch)
	}
	wg.Wait()
	e.advance(time.Minute)

	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.starts) == 0 {
		t.Fatal("no runner ever started a job")
	}
	for id, rs := range c.starts {
		if len(rs) > 1 {
			t.Errorf("job %d started on %v", id, rs)
		}
	}
	for name, n := range c.perRunner {
		if n > 1 {
			t.Errorf("runner %s ran %d jobs", name, n)
		}
	}
	checkWebhookOrder(t, e.rec.all(), c.queued)
}

// crowd is the shared state of TestConcurrentUse's goroutines.
type crowd struct {
	e         *env
	mu        sync.Mutex
	starts    map[int64][]string // job id → runners that started it
	perRunner map[string]int     // runner name → jobs started
	queued    []domain.GitHubJob
}

const perWorker = 40

// queueJobs queues jobs of two label sets and cancels every tenth run.
func (c *crowd) queueJobs() {
	labels := [][]string{{"linux"}, {"linux", "gpu"}}
	for i := range perWorker {
		j := c.e.gh.QueueJob(sim.JobSpec{Repo: "acme/app", Labels: labels[i%2], Duration: time.Duration(i%5) * time.Second})
		c.mu.Lock()
		c.queued = append(c.queued, j)
		c.mu.Unlock()
		if i%10 == 9 {
			_ = c.e.gh.CancelRun(c.e.t.Context(), j.Repo, j.RunID)
		}
	}
}

// runRunners registers and starts runners, deleting every seventh.
func (c *crowd) runRunners(w int) {
	t := c.e.t
	for i := range perWorker {
		name := fmt.Sprintf("w%d-r%d", w, i)
		reg, err := c.e.gh.RegisterRunner(t.Context(), org, name, []string{"linux", "gpu"}[:1+i%2])
		if err != nil {
			t.Errorf("RegisterRunner: %v", err)
			return
		}
		onStart := func(id int64) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.starts[id] = append(c.starts[id], name)
			c.perRunner[name]++
		}
		if err := c.e.gh.RunJIT(t.Context(), reg.JITConfig, onStart, nil); err != nil {
			t.Errorf("RunJIT: %v", err)
		}
		if i%7 == 0 {
			_ = c.e.gh.DeleteRunner(t.Context(), org, reg.RunnerID)
		}
	}
}

// watch lists runners and queued jobs while moving the clock.
func (c *crowd) watch() {
	t := c.e.t
	for range perWorker {
		if _, err := c.e.gh.ListRunners(t.Context(), org); err != nil {
			t.Errorf("ListRunners: %v", err)
		}
		if _, err := c.e.gh.QueuedJobs(t.Context(), org); err != nil {
			t.Errorf("QueuedJobs: %v", err)
		}
		c.e.clk.Advance(time.Second)
	}
}

// checkWebhookOrder checks that each job's webhooks follow queued →
// in_progress → completed (in_progress is skipped when a queued job is
// cancelled), and that delivery ids are unique.
func checkWebhookOrder(t *testing.T, got []delivery, jobs []domain.GitHubJob) {
	t.Helper()
	byJob := map[int64][]string{}
	ids := map[string]bool{}
	for _, d := range got {
		byJob[d.jobID] = append(byJob[d.jobID], d.action)
		if ids[d.id] {
			t.Errorf("delivery id %s used twice", d.id)
		}
		ids[d.id] = true
	}
	lifecycles := [][]string{
		{"queued"}, {"queued", "in_progress"}, {"queued", "completed"}, {"queued", "in_progress", "completed"},
	}
	for _, j := range jobs {
		if acts := byJob[j.ID]; !slices.ContainsFunc(lifecycles, func(l []string) bool { return slices.Equal(l, acts) }) {
			t.Errorf("job %d webhooks %v", j.ID, acts)
		}
	}
}
