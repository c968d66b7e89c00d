// Package demo runs bullpen's pool converger against the SQLite store and the
// simulated cloud, on a clock that can run faster than real time, and shows
// the pools converging. It is the first thing a new user runs.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/rebalance"
	"github.com/bullpen-ci/bullpen/internal/signals"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
)

// Options configure a demo run.
type Options struct {
	Config   *config.Config
	Speed    float64       // virtual seconds per real second; 0 runs as fast as possible
	Duration time.Duration // virtual time to run for
	Start    time.Time     // virtual start; zero means now
	Interval time.Duration // converger interval; default 30 s
	// RollAt, when positive, publishes a new version of every runner's
	// image at that virtual offset, so every pool rolls to a new spec.
	RollAt    time.Duration
	Latency   sim.Latency
	StorePath string // SQLite file; "" uses a temporary one
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
	AtTarget bool `json:"at_target"`
	Rolled   bool `json:"rolled,omitempty"` // every member carries the spec in force at the end
}

// Result is the demo's final report.
type Result struct {
	Pools      []PoolResult   `json:"pools"`
	Cycles     int            `json:"cycles"`
	Virtual    string         `json:"virtual_duration"`
	CloudCalls map[string]int `json:"cloud_calls"`
	AllAtGoal  bool           `json:"all_at_target"`
}

// Run runs the demo until the virtual duration has passed or ctx ends (a
// clean stop either way: the result describes the state at that moment).
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
	pace, clk := newPacer(o.Start, o.Speed)
	w, err := newWorld(context.WithoutCancel(ctx), o, clk) // setup is short; let it finish
	if err != nil {
		return Result{}, err
	}
	defer w.close()

	end := o.Start.Add(o.Duration)
	rolled := o.RollAt <= 0
	var res Result
	var last converger.Report
	for {
		if !rolled && !clk.Now().Before(o.Start.Add(o.RollAt)) {
			w.roll(o.Lines)
			rolled = true
		}
		rep, err := w.conv.Cycle(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return res, err
		}
		res.Cycles++
		last = rep
		printCycle(o.Lines, o.Start, rep)
		next := rep.At.Add(o.Interval)
		if next.After(end) {
			next = end
		}
		if err := pace.waitUntil(ctx, next); err != nil || !next.Before(end) {
			break // done, or interrupted: report the state at this moment
		}
	}
	return w.result(context.WithoutCancel(ctx), res, last, clk.Now().Sub(o.Start))
}

// world is the embedded default wired together.
type world struct {
	cfg   *config.Config
	store *sqlite.Store
	cloud *sim.Cloud
	conv  *converger.Converger
	tmp   string
}

func newWorld(ctx context.Context, o Options, clk domain.Clock) (*world, error) {
	w := &world{cfg: o.Config}
	path := o.StorePath
	if path == "" {
		dir, err := os.MkdirTemp("", "bullpen-demo-")
		if err != nil {
			return nil, fmt.Errorf("demo: temporary directory: %w", err)
		}
		w.tmp, path = dir, filepath.Join(dir, "bullpen.db")
	}
	st, err := sqlite.Open(ctx, path, clk)
	if err != nil {
		w.close()
		return nil, fmt.Errorf("demo: open store: %w", err)
	}
	w.store = st
	handler := &signals.Handler{
		Store: st, Clock: clk, Deadlines: domain.DefaultDeadlines(), Log: o.Log,
		Pool: func(name string) (domain.Pool, bool) { return o.Config.Pool(name) },
	}
	w.cloud = sim.New(clk, sim.Options{Latency: o.Latency, Signals: handler})
	w.conv, err = converger.New(st, w.cloud, clk, w.pools, o.Log, prometheus.NewRegistry(), converger.Options{
		Interval: o.Interval, ControllerID: "bullpen-demo", LeaseTTL: -1,
	})
	if err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *world) pools() []converger.PoolSpec {
	var out []converger.PoolSpec
	for _, p := range w.cfg.Pools {
		r, _ := w.cfg.Runner(p.Runner) // validated: every pool names a runner
		out = append(out, converger.PoolSpec{Pool: p, Runner: r})
	}
	return out
}

// roll publishes a new version of every image the pools use.
func (w *world) roll(lines io.Writer) {
	seen := map[string]bool{}
	for _, ps := range w.pools() {
		if img := ps.Runner.Image; !seen[img] {
			seen[img] = true
			w.cloud.PublishImage(img)
			if lines != nil {
				fmt.Fprintf(lines, "        ⟳ new image published for %s: pools using it roll to a new spec\n", img)
			}
		}
	}
}

func (w *world) result(ctx context.Context, res Result, last converger.Report, elapsed time.Duration) (Result, error) {
	rows, err := w.store.ListInstances(ctx, domain.InstanceFilter{})
	if err != nil {
		return res, fmt.Errorf("demo: read final state: %w", err)
	}
	byPool := map[string][]domain.Instance{}
	for _, in := range rows {
		byPool[in.Pool] = append(byPool[in.Pool], in)
	}
	res.AllAtGoal = true
	for _, pr := range last.Pools {
		c := rebalance.Count(byPool[pr.Pool])
		r := PoolResult{Name: pr.Pool, Schedule: pr.Schedule, Target: pr.Target, Counts: c}
		r.AtTarget = c.ReadyHot == pr.Target.Hot && c.Stopped == pr.Target.Stopped && c.Warming == 0 && c.Other == 0
		r.Rolled = true
		for _, in := range byPool[pr.Pool] {
			if in.State != domain.StateTerminated && in.SpecHash != pr.SpecHash {
				r.Rolled = false
			}
		}
		res.AllAtGoal = res.AllAtGoal && r.AtTarget
		res.Pools = append(res.Pools, r)
	}
	res.Virtual = elapsed.Round(time.Second).String()
	res.CloudCalls = w.cloud.Calls()
	return res, nil
}

func (w *world) close() {
	if w.cloud != nil {
		w.cloud.Close()
	}
	if w.store != nil {
		w.store.Close()
	}
	if w.tmp != "" {
		os.RemoveAll(w.tmp)
	}
}

// pacer lets virtual time pass: in step with the wall clock (scaled), or as
// fast as the simulation can settle (virtual).
type pacer interface {
	waitUntil(ctx context.Context, t time.Time) error
}

func newPacer(start time.Time, speed float64) (pacer, domain.Clock) {
	if speed <= 0 {
		v := clock.NewVirtual(start)
		return virtualPacer{v}, v
	}
	s := clock.NewScaled(start, speed)
	return scaledPacer{s}, s
}

type scaledPacer struct{ c *clock.Scaled }

func (p scaledPacer) waitUntil(ctx context.Context, t time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-p.c.After(t.Sub(p.c.Now())):
		return nil
	}
}

type virtualPacer struct{ c *clock.Virtual }

// waitUntil steps from timer to timer, letting each one's effects settle
// before the next, so a run is the same every time.
func (p virtualPacer) waitUntil(ctx context.Context, t time.Time) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		next, ok := p.c.Next()
		if !ok || next.After(t) {
			p.c.AdvanceTo(t)
			p.c.Settle()
			return nil
		}
		p.c.AdvanceTo(next)
		p.c.Settle()
	}
}
