// Package demo runs the whole control plane on the embedded default (SQLite
// store, simulated cloud, simulated GitHub and agents), on a clock that can
// run faster than real time, feeds it jobs, and shows pools converging and
// jobs being served. It is the first thing a new user runs.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/intake"
	"github.com/bullpen-ci/bullpen/internal/rebalance"
	"github.com/bullpen-ci/bullpen/internal/simagent"
)

// Options configure a demo run.
type Options struct {
	Config *config.Config
	// Environment is the environment whose pools the run serves, as
	// serve's --environment; "" picks one (see Environment). Jobs for
	// the other environments' pools are rejected, as serve rejects them.
	Environment string
	Speed       float64       // virtual seconds per real second; 0 runs as fast as possible
	Duration    time.Duration // virtual time to run for
	Start       time.Time     // virtual start; zero means now
	Interval    time.Duration // converger interval; default 30 s
	// RollAt, when positive, publishes a new version of every runner's
	// image at that virtual offset, so every pool rolls to a new spec.
	RollAt time.Duration
	// JobsPerMinute is the mean rate of simulated jobs (0: none).
	JobsPerMinute float64
	// Scheduled are jobs queued at given offsets from the start (a replayed
	// history), besides the generated ones.
	Scheduled []Scheduled
	// BillFrom, when set, is when the instance-hours begin: time before
	// it (a warm-up in which the pools fill, say) is not counted.
	BillFrom time.Time
	// EndWhenServed ends the run before Duration has passed, at the first
	// converger cycle after the last scheduled job has arrived (and the
	// generated ones have stopped) at which every job is served: none is
	// queued, assigned or running, none that a spot interruption failed
	// waits for its re-run, and the intake has taken in every delivery.
	// Such an end is no interruption.
	EndWhenServed bool
	// Progress, when set, is told the virtual time every converger cycle.
	Progress func(at time.Time)
	// Mix is the kinds of jobs; default ghsim.MixFor of the pools the
	// run serves.
	Mix     []ghsim.LabelChoice
	Seed    uint64
	Latency sim.Latency
	// FamilyLatency overrides Latency for the instance types of a family.
	FamilyLatency map[string]sim.Latency
	// StorePath is the SQLite file to keep the state in, which must not
	// hold any yet; "" uses a temporary one.
	StorePath string
	Log       *slog.Logger
	// Lines receives one line per pool per cycle; nil prints nothing.
	Lines io.Writer
}

// DefaultLatency is a plausible EC2-like latency model.
var DefaultLatency = sim.Latency{
	Boot: 15 * time.Second, WarmUp: 30 * time.Second, Stop: 10 * time.Second,
	Start: 10 * time.Second, Terminate: 5 * time.Second,
}

// PoolResult is one pool's state when the demo ends.
type PoolResult struct {
	Name     string        `json:"name"`
	Schedule string        `json:"schedule"`
	Target   domain.Target `json:"target"`
	rebalance.Counts
	// OtherStates are the states of the members counted as Other
	// (stopping, terminating, in error): why a pool whose ready and
	// stopped counts match its target is not at it.
	OtherStates map[string]int `json:"other_states,omitempty"`
	AtTarget    bool           `json:"at_target"`
	Rolled      bool           `json:"rolled,omitempty"` // every member carries the spec in force at the end
}

// Result is the demo's final report.
type Result struct {
	// Environment is the one whose pools the run served.
	Environment string         `json:"environment"`
	Pools       []PoolResult   `json:"pools"`
	Jobs        JobsReport     `json:"jobs"`
	Cycles      int            `json:"cycles"`
	Virtual     string         `json:"virtual_duration"`
	CloudCalls  map[string]int `json:"cloud_calls"`
	AllAtGoal   bool           `json:"all_at_target"`
	// Interrupted is set when ctx ended the run before its virtual
	// duration had passed: the result is the state at that moment.
	Interrupted bool `json:"interrupted,omitempty"`
	// End is the virtual time the run ended: its duration after the
	// start, or sooner (EndWhenServed, or an interruption).
	End time.Time `json:"end"`
	// InstanceHours is the run's instance time by type, option and state.
	InstanceHours []InstanceHours `json:"instance_hours"`
	// Pace says how well the loops kept up with a scaled clock (a run at
	// --speed 0 cannot fall behind: time waits for the loops).
	Pace *Pace `json:"pace,omitempty"`
	// Warnings say what makes the run's figures misleading: an
	// environment no pool names, loops that fell behind the clock.
	Warnings []string `json:"warnings,omitempty"`
	// Stream is every job the simulated GitHub saw, with its times.
	Stream []ghsim.JobRecord `json:"-"`
}

// Run runs the demo until the virtual duration has passed or ctx ends (a
// clean stop either way: the result describes the state at that moment,
// and Interrupted says which it was).
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Interval <= 0 {
		o.Interval = 30 * time.Second
	}
	if o.Start.IsZero() {
		o.Start = time.Now().UTC().Truncate(time.Second)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	env, err := Environment(o.Config, o.Environment)
	if err != nil {
		return Result{}, fmt.Errorf("demo: %w", err)
	}
	o.Environment = env
	if o.Mix == nil {
		o.Mix = ghsim.MixFor(o.Config.PoolsFor(env), intake.EnvLabel(env))
	}
	drv, clk := newDriver(o.Start, o.Speed)
	w, err := newWorld(context.WithoutCancel(ctx), o, clk, o.Speed <= 0) // setup is short; let it finish
	if err != nil {
		return Result{}, err
	}
	defer w.close()

	res := Result{Environment: env}
	if warning := environmentWarning(o.Config, env); warning != "" {
		res.Warnings = append(res.Warnings, warning)
	}
	var last converger.Report
	used := &usage{from: o.BillFrom}
	w.used = used
	end := o.Start.Add(o.Duration)
	if o.Speed > 0 {
		w.pace = newPace(o.Speed, o.Start, end, o.Interval)
	}
	w.onCycle = func(rep converger.Report) {
		if w.pace != nil {
			w.pace.cycle(rep.At, clk.Now())
		}
		res.Cycles++
		last = rep
		used.sample(context.WithoutCancel(ctx), w.a.Store, w.a.Config().Runner, rep.At)
		if o.EndWhenServed && w.allServed(context.WithoutCancel(ctx), rep.At) {
			w.markServed()
		}
		if o.Progress != nil {
			o.Progress(rep.At)
		}
		if o.Lines != nil { // the jobs line reads every job: only for a display
			printCycle(o.Lines, o.Start, rep, w.jobLine(context.WithoutCancel(ctx)))
		}
	}
	if o.RollAt > 0 {
		w.rollAt, w.lines = o.Start.Add(o.RollAt), o.Lines
	}
	if o.JobsPerMinute > 0 {
		// Jobs stop arriving early enough for every pool to refill before
		// the end, so the run ends with pools at their targets.
		w.gen.Start()
		defer w.gen.Stop()
		quiet := clk.AfterFunc(feedFor(o.Duration), w.gen.Stop)
		defer quiet.Stop()
		w.feedEnds = o.Start.Add(feedFor(o.Duration))
	}
	w.scheduled = len(o.Scheduled)
	for _, sj := range o.Scheduled {
		t := clk.AfterFunc(sj.At, func() {
			w.a.Sim.GitHub.QueueJob(sj.Job)
			w.arrived.Add(1)
		})
		defer t.Stop()
	}
	if err := drv.run(ctx, w, end); err != nil {
		return Result{}, fmt.Errorf("demo: stopped after %s of virtual time: %w", clk.Now().Sub(o.Start).Round(time.Second), err)
	}
	res.End = clk.Now()
	res.Interrupted = !w.isServed() && ctx.Err() != nil && res.End.Before(end)
	res, err = w.result(context.WithoutCancel(ctx), res, last, clk.Now().Sub(o.Start))
	res.InstanceHours = used.list()
	if w.pace != nil {
		var warning string
		if res.Pace, warning = w.pace.report(res.End); warning != "" {
			res.Warnings = append(res.Warnings, warning)
		}
	}
	return res, err
}

// Scheduled is a job the run queues on the simulated GitHub At after its
// start.
type Scheduled struct {
	At  time.Duration
	Job ghsim.JobSpec
}

// world is the embedded default wired together by internal/app.
type world struct {
	a        *app.App
	gen      *ghsim.Generator
	tmp      string
	interval time.Duration
	onCycle  func(converger.Report)
	used     *usage
	pace     *pace // on a scaled clock only
	// The roll: at rollAt (zero: never), once, announced on lines.
	rollAt time.Time
	lines  io.Writer
	rolled bool
	log    *slog.Logger
	// For EndWhenServed: the scheduled jobs, those arrived so far, the
	// end of the generated jobs' arrivals, and served, closed once every
	// job is served.
	scheduled  int
	arrived    atomic.Int64
	feedEnds   time.Time
	served     chan struct{}
	servedOnce sync.Once
}

// markServed tells the driver that every job is served.
func (w *world) markServed() { w.servedOnce.Do(func() { close(w.served) }) }

// isServed reports whether markServed was called.
func (w *world) isServed() bool {
	select {
	case <-w.served:
		return true
	default:
		return false
	}
}

// stepFailed logs a failed step of the job path: the run goes on, as
// serve's loops do, and retries it at the next step.
func (w *world) stepFailed(what string, err error) {
	if err != nil && !errors.Is(err, context.Canceled) && w.log != nil {
		w.log.Warn("demo: step failed; retried at the next", "step", what, "err", err)
	}
}

func newWorld(ctx context.Context, o Options, clk domain.Clock, stepped bool) (*world, error) {
	w := &world{interval: o.Interval, log: o.Log, served: make(chan struct{})}
	path := o.StorePath
	if err := checkFreshStore(path); err != nil {
		return nil, err
	}
	if path == "" {
		dir, err := os.MkdirTemp("", "bullpen-demo-")
		if err != nil {
			return nil, fmt.Errorf("demo: temporary directory: %w", err)
		}
		w.tmp, path = dir, filepath.Join(dir, "bullpen.db")
	}
	opts := app.Options{
		Config: o.Config, Environment: o.Environment, StorePath: path, ControllerID: "bullpen-demo",
		WebhookSecret: "demo-secret", AdminToken: "demo", Clock: clk, Log: o.Log, Registry: prometheus.NewRegistry(),
		Latency: o.Latency, FamilyLatency: o.FamilyLatency, Agent: simagent.Options{WarmUp: o.Latency.WarmUp, RestartWarmUp: 3 * time.Second,
			// A waiting agent is woken by notices, as a real one's long
			// poll is answered at once; otherwise it asks again when the
			// real agent's long poll would end.
			PollEvery: agent.DefaultPollWait},
		Converger: converger.Options{Interval: o.Interval, LeaseTTL: -1},
		OnCycle:   func(r converger.Report) { w.onCycle(r) },
	}
	// The store is always new (see checkFreshStore): ids drawn from the
	// seed cannot meet those of an earlier run.
	opts.SimSeed, opts.IDs = o.Seed, seededIDs(o.Seed)
	opts.ScratchStore = o.StorePath == "" // removed by close
	if stepped {
		// The virtual driver calls each loop's step itself: no long polls.
		opts.Intake.Wait, opts.Dispatch.Wait, opts.Provision.Wait = -1, -1, -1
	}
	a, err := app.New(ctx, opts)
	if err != nil {
		w.close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	w.a = a
	w.gen = ghsim.NewGenerator(a.Sim.GitHub, clk, ghsim.GeneratorOptions{
		Seed: o.Seed, PerMinute: o.JobsPerMinute, Mix: o.Mix, MinDuration: time.Minute, MaxDuration: 3 * time.Minute,
	})
	return w, nil
}

// checkFreshStore refuses a store file that holds anything: each run's
// simulated cloud and GitHub start empty, so an earlier run's instances
// and jobs would name machines that do not exist (terminations failing
// with InvalidInstanceID.NotFound, pools counted at target on them, jobs
// running forever). Starting the file afresh instead would destroy what
// the user pointed at, which may not be a demo's. An empty file is new.
func checkFreshStore(path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("demo: store: %w", err)
	case fi.Size() > 0:
		return fmt.Errorf("demo: store %s already holds state (an earlier run's?): the simulated cloud starts empty "+
			"every run, so that state would name machines that do not exist; delete the file or pick another path", path)
	}
	return nil
}

// seededIDs draws ids of domain.NewID's form from a sequence seeded by
// seed: instances created at one instant are listed in id order, so random
// ids would make a run's choices differ from one run to the next.
func seededIDs(seed uint64) func(prefix string) string {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed^0x3c6ef372fe94f82b))
	return func(prefix string) string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%s-%016x", prefix, rng.Uint64())
	}
}

// feedFor is how long jobs arrive: all but the last four minutes of a long
// run (a stopped pool refills in about two), half of a short one.
func feedFor(d time.Duration) time.Duration {
	if d > 8*time.Minute {
		return d - 4*time.Minute
	}
	return d / 2
}

// maybeRoll publishes a new version of every image the pools use, once,
// when the roll is due at now.
func (w *world) maybeRoll(now time.Time) {
	if w.rolled || w.rollAt.IsZero() || now.Before(w.rollAt) {
		return
	}
	w.roll(w.lines)
}

func (w *world) roll(lines io.Writer) {
	w.rolled = true
	seen := map[string]bool{}
	cfg := w.a.Config()
	for _, p := range cfg.Pools {
		r, _ := cfg.Runner(p.Runner)
		if img := r.Image; img != "" && !seen[img] {
			seen[img] = true
			w.a.Sim.Cloud.PublishImage(img)
			if lines != nil {
				fmt.Fprintf(lines, "        ⟳ new image published for %s: pools using it roll to a new spec\n", img)
			}
		}
	}
}

func (w *world) result(ctx context.Context, res Result, last converger.Report, elapsed time.Duration) (Result, error) {
	rows, err := w.a.Store.ListInstances(ctx, domain.InstanceFilter{})
	if err != nil {
		return res, fmt.Errorf("demo: read final state: %w", err)
	}
	byPool := map[string][]domain.Instance{}
	for _, in := range rows {
		if in.Role == domain.RoleHot || in.Role == domain.RoleStopped {
			byPool[in.Pool] = append(byPool[in.Pool], in)
		}
	}
	res.AllAtGoal = true
	for _, pr := range last.Pools {
		c := rebalance.Count(byPool[pr.Pool])
		r := PoolResult{Name: pr.Pool, Schedule: pr.Schedule, Target: pr.Target, Counts: c}
		r.AtTarget = c.ReadyHot == pr.Target.Hot && c.Stopped == pr.Target.Stopped && c.Warming == 0 && c.Other == 0
		r.Rolled = true
		for _, in := range byPool[pr.Pool] {
			if in.State != domain.StateTerminated && !in.Detached() && in.SpecHash != pr.SpecHash {
				r.Rolled = false
			}
			if rebalance.Count([]domain.Instance{in}).Other > 0 {
				if r.OtherStates == nil {
					r.OtherStates = map[string]int{}
				}
				r.OtherStates[string(in.State)]++
			}
		}
		res.AllAtGoal = res.AllAtGoal && r.AtTarget
		res.Pools = append(res.Pools, r)
	}
	if res.Jobs, err = w.jobsReport(ctx); err != nil {
		return res, err
	}
	res.Virtual = elapsed.Round(time.Second).String()
	res.CloudCalls = w.a.Sim.Cloud.Calls()
	res.Stream = w.a.Sim.GitHub.Jobs()
	return res, nil
}

func (w *world) close() {
	if w.a != nil {
		w.a.Close()
	}
	if w.tmp != "" {
		os.RemoveAll(w.tmp)
	}
}

// driver lets virtual time pass and runs the loops: the app's own loops on
// a scaled wall clock, or a step-by-step schedule on a virtual clock that
// advances from timer to timer as fast as the simulation settles.
type driver interface {
	// run returns when the clock reaches end or ctx ends, or with the
	// error that stopped the loops before either.
	run(ctx context.Context, w *world, end time.Time) error
}

func newDriver(start time.Time, speed float64) (driver, domain.Clock) {
	if speed <= 0 {
		v := clock.NewSerial(start)
		return &virtualDriver{c: v}, v
	}
	s := clock.NewScaled(start, speed)
	return &scaledDriver{c: s}, s
}
