package sim

import (
	"context"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// This file is the built-in warm-only agent: without Options.Lifecycle, each
// machine reports that warm-up finished, and nothing else. Full agents
// (heartbeats, jobs, release) live outside the sim and follow machines
// through Options.Lifecycle (lifecycle.go).

// run is one stint of a machine towards and in running: from a create or a
// start until a stop or a terminate. Signals belong to a run, so a signal
// scheduled for an earlier stint is never sent on behalf of a later one.
type run struct {
	warmAt    time.Time    // when the warm signal is first due
	runningAt time.Time    // when the machine reaches running
	end       time.Time    // when the machine left running; zero while it has not
	timer     domain.Timer // the pending warm signal, if any
	announced bool         // Lifecycle.Running has been queued for this run
}

// aliveAt reports whether the machine was still in this run at t.
func (r *run) aliveAt(t time.Time) bool { return r.end.IsZero() || t.Before(r.end) }

func (r *run) stopTimer() {
	if r != nil && r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

// startRun begins a stint for m that reaches running at runningAt. Called
// under c.mu.
func (c *Cloud) startRun(m *machine, now, runningAt time.Time) {
	c.endRun(m, now)
	r := &run{warmAt: runningAt.Add(c.opts.latency(m.inst.InstanceType).WarmUp), runningAt: runningAt}
	m.run = r
	if c.opts.Lifecycle != nil {
		c.scheduleArrival(m, r, now)
		return
	}
	c.scheduleWarm(m.inst.ID, r, r.warmAt, now)
}

// endRun records that m left running at now and cancels its pending signal.
// Called under c.mu.
func (c *Cloud) endRun(m *machine, now time.Time) {
	if r := m.run; r != nil && r.end.IsZero() {
		r.end = now
		r.stopTimer()
		if c.opts.Lifecycle != nil {
			c.haltRun(m, r, now)
		}
	}
}

// scheduleWarm arranges for the warm signal of r to be sent at due. Called
// under c.mu; the clock runs the callback in its own goroutine.
func (c *Cloud) scheduleWarm(id string, r *run, due, now time.Time) {
	if m := c.machines[id]; c.opts.Signals == nil || c.opts.Lifecycle != nil || c.closed || m == nil || m.neverWarm {
		return
	}
	r.timer = c.clk.AfterFunc(due.Sub(now), func() { c.sendWarm(id, r, due) })
}

// sendWarm delivers the warm signal stamped with the virtual time it was due
// (not the time the goroutine got to run), and schedules a retry when the
// sink refuses it.
func (c *Cloud) sendWarm(id string, r *run, due time.Time) {
	c.mu.Lock()
	r.timer = nil
	ok := c.wantsWarm(id, r, due)
	c.mu.Unlock()
	if !ok {
		return
	}
	sig := domain.Signal{CloudID: id, Kind: domain.SignalWarm, At: due}
	if err := c.opts.Signals.Signal(context.Background(), sig); err == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := due.Add(c.opts.SignalRetry)
	if c.wantsWarm(id, r, next) {
		c.scheduleWarm(id, r, next, c.clk.Now())
	}
}

// wantsWarm reports whether the agent of r should send its warm signal at
// t. Called under c.mu.
func (c *Cloud) wantsWarm(id string, r *run, t time.Time) bool {
	m, ok := c.machines[id]
	return ok && !c.closed && !m.neverWarm && r.aliveAt(t)
}
