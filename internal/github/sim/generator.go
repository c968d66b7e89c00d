package sim

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// LabelChoice is one kind of job the generator makes, picked with
// probability proportional to Weight.
type LabelChoice struct {
	Labels []string // RunIDExpr in them becomes the run id
	Repo   string   // DefaultRepo when empty
	Weight float64
}

// MixFor is a job mix for pools: most jobs ask for a pool, some name a
// reusing pool's runner (served by reuse or a new instance), a few name an
// ad-hoc spec (a new instance). A non-empty env is written in every job's
// labels (env=NAME), for a stack of an environment that takes only jobs
// naming it; a dependabot job, which carries no other label, is then left
// out.
func MixFor(pools []domain.Pool, env string) []LabelChoice {
	suffix := ""
	if env != "" {
		suffix = "/env=" + env
	}
	var mix []LabelChoice
	for _, p := range pools {
		if p.Name == "dependabot" {
			if env == "" {
				mix = append(mix, LabelChoice{Labels: []string{"dependabot"}, Weight: 1})
			}
			continue
		}
		mix = append(mix, LabelChoice{Labels: []string{"runs-on=" + RunIDExpr + "/pool=" + p.Name + suffix}, Weight: 3})
	}
	for _, p := range pools {
		if p.Reuse {
			mix = append(mix, LabelChoice{Labels: []string{"runs-on=" + RunIDExpr + "/runner=" + p.Runner + suffix}, Weight: 2})
		}
	}
	return append(mix, LabelChoice{Labels: []string{"runs-on=" + RunIDExpr + "/cpu=4/ram=16" + suffix}, Weight: 1})
}

// GeneratorOptions configure a Generator.
type GeneratorOptions struct {
	Seed uint64
	// PerMinute is the mean arrival rate; arrivals are a Poisson process
	// (exponential gaps). Zero or less generates nothing on its own.
	PerMinute float64
	// Mix is the kinds of jobs; empty means one kind labelled
	// "self-hosted". If no weight is positive, kinds are equally likely.
	Mix []LabelChoice
	// Each job runs for a duration drawn uniformly from [MinDuration,
	// MaxDuration] (MinDuration when MaxDuration is not above it).
	MinDuration, MaxDuration time.Duration
}

// Generator queues jobs on a GitHub at random times for demos and
// simulations. With clock.Virtual and the same seed, it queues the same jobs
// at the same virtual times whatever the steps the clock is advanced by:
// each job is stamped with the time it was due, even when the clock's
// callback runs late. It is safe for concurrent use.
type Generator struct {
	gh   *GitHub
	clk  domain.Clock
	opts GeneratorOptions

	mu      sync.Mutex
	rng     *rand.Rand
	running bool
	epoch   int // bumped by Start, so callbacks of an earlier run do nothing
	next    time.Time
	timer   domain.Timer
	made    int
}

// NewGenerator returns a stopped generator queueing on gh.
func NewGenerator(gh *GitHub, clk domain.Clock, opts GeneratorOptions) *Generator {
	if len(opts.Mix) == 0 {
		opts.Mix = []LabelChoice{{Labels: []string{"self-hosted"}, Weight: 1}}
	}
	return &Generator{gh: gh, clk: clk, opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0xbb67ae8584caa73b))}
}

// Start begins arrivals from now. Starting a running generator does
// nothing.
func (gen *Generator) Start() {
	gen.mu.Lock()
	defer gen.mu.Unlock()
	if gen.running {
		return
	}
	gen.running = true
	gen.epoch++
	gen.next = gen.clk.Now()
	gen.schedule(gen.epoch)
}

// Stop ends arrivals; a job whose arrival is being handled may still be
// queued.
func (gen *Generator) Stop() {
	gen.mu.Lock()
	defer gen.mu.Unlock()
	gen.running = false
	if gen.timer != nil {
		gen.timer.Stop()
		gen.timer = nil
	}
}

// Burst queues n jobs at once and returns them as queued. Zero fields of
// spec are filled as the generator fills its own jobs: Labels (with Repo, if
// empty too) from the mix, Duration from the range.
func (gen *Generator) Burst(n int, spec JobSpec) []domain.GitHubJob {
	gen.mu.Lock()
	out := make([]domain.GitHubJob, 0, max(n, 0))
	now := gen.clk.Now()
	for range n {
		out = append(out, gen.gh.queueAt(gen.fill(spec), now))
	}
	gen.mu.Unlock()
	gen.gh.flush()
	return out
}

// schedule sets the timer for the arrival after gen.next. Called under
// gen.mu.
func (gen *Generator) schedule(epoch int) {
	if gen.opts.PerMinute <= 0 {
		return
	}
	gap := time.Duration(gen.rng.ExpFloat64() * float64(time.Minute) / gen.opts.PerMinute)
	gen.next = gen.next.Add(gap)
	due := gen.next
	gen.timer = gen.clk.AfterFunc(due.Sub(gen.clk.Now()), func() { gen.arrive(epoch, due) })
}

// arrive queues the job due at due and schedules the next. The job is
// queued under gen.mu so that a late callback and the next one cannot swap
// their jobs' order; webhooks go out after it is released.
func (gen *Generator) arrive(epoch int, due time.Time) {
	gen.mu.Lock()
	if !gen.running || epoch != gen.epoch {
		gen.mu.Unlock()
		return
	}
	gen.gh.queueAt(gen.fill(JobSpec{}), due)
	gen.schedule(epoch)
	gen.mu.Unlock()
	gen.gh.flush()
}

// fill completes spec from the mix and the duration range. Called under
// gen.mu.
func (gen *Generator) fill(spec JobSpec) JobSpec {
	gen.made++
	if len(spec.Labels) == 0 {
		c := gen.pick()
		spec.Labels = c.Labels
		if spec.Repo == "" {
			spec.Repo = c.Repo
		}
	}
	if spec.Duration == 0 {
		spec.Duration = gen.opts.MinDuration
		if span := gen.opts.MaxDuration - gen.opts.MinDuration; span > 0 {
			spec.Duration += time.Duration(gen.rng.Int64N(int64(span) + 1))
		}
	}
	if spec.Name == "" {
		spec.Name = fmt.Sprintf("job-%d", gen.made)
	}
	return spec
}

// pick draws a kind of job by weight. Called under gen.mu.
func (gen *Generator) pick() LabelChoice {
	total := 0.0
	for _, c := range gen.opts.Mix {
		total += max(c.Weight, 0)
	}
	if total <= 0 {
		return gen.opts.Mix[gen.rng.IntN(len(gen.opts.Mix))]
	}
	x := gen.rng.Float64() * total
	for _, c := range gen.opts.Mix {
		if x -= max(c.Weight, 0); x < 0 {
			return c
		}
	}
	return gen.opts.Mix[len(gen.opts.Mix)-1]
}
