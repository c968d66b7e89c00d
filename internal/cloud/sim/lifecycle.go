package sim

import (
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Lifecycle follows machines in and out of running. It is how agents
// simulated outside the sim learn when their machine boots and when it goes
// away.
//
// The sim calls it outside its lock, from clock callbacks, one call at a
// time and in the order things happened: Running at the virtual instant a
// machine reaches running (after Create's boot, and after every Start), then
// Halted when it leaves running (Stop, Terminate, or Close). Every Running is
// followed by exactly one Halted for the same machine before the next
// Running for it; a machine terminated or stopped before it reached running
// gets neither. Machines reaching running at the same instant are announced
// in creation order, so that runs on a virtual clock are reproducible.
type Lifecycle interface {
	// Running: the machine m (as described at that instant) runs from at.
	Running(m domain.CloudInstance, at time.Time)
	// Halted: the machine stopped running at at.
	Halted(cloudID string, at time.Time)
}

// arrival is the runs due to reach running at one instant. One clock timer
// serves them all, so they are announced in a fixed order.
type arrival struct {
	key     int64
	timer   domain.Timer
	entries []arrivalEntry
}

type arrivalEntry struct {
	m *machine
	r *run
}

// lifecycleEvent is one queued Lifecycle call: Running when halted is false.
type lifecycleEvent struct {
	halted bool
	inst   domain.CloudInstance // Running only
	id     string
	at     time.Time
}

// scheduleArrival arranges for r to be announced when m reaches running.
// Called under c.mu.
func (c *Cloud) scheduleArrival(m *machine, r *run, now time.Time) {
	if c.closed {
		return
	}
	key := r.runningAt.UnixNano()
	a := c.arrivals[key]
	if a == nil {
		a = &arrival{key: key}
		c.arrivals[key] = a
		a.timer = c.clk.AfterFunc(r.runningAt.Sub(now), func() { c.arrive(a) })
	}
	a.entries = append(a.entries, arrivalEntry{m: m, r: r})
}

// arrive announces every run of a that is still on its way, in creation
// order, then delivers.
func (c *Cloud) arrive(a *arrival) {
	c.mu.Lock()
	if c.arrivals[a.key] != a {
		c.mu.Unlock() // emptied by halts, or Close
		return
	}
	delete(c.arrivals, a.key)
	slices.SortStableFunc(a.entries, func(x, y arrivalEntry) int { return x.m.seq - y.m.seq })
	for _, e := range a.entries {
		if !e.r.announced && e.r.end.IsZero() {
			c.queueRunning(e.m, e.r)
		}
	}
	c.mu.Unlock()
	c.deliver()
}

// haltRun queues the notices for r ending at now: Halted, preceded by its
// Running when the run reached running but its announcement has not been
// made yet (the clock passed the instant and its callback has yet to run).
// A run that never reached running is just taken off its arrival. Called
// under c.mu.
func (c *Cloud) haltRun(m *machine, r *run, now time.Time) {
	if c.closed {
		return
	}
	c.dropArrival(m, r)
	if r.runningAt.After(now) {
		return
	}
	if !r.announced {
		c.queueRunning(m, r)
	}
	c.events = append(c.events, lifecycleEvent{halted: true, id: m.inst.ID, at: now})
	c.kick()
}

// dropArrival takes r off its pending arrival, stopping the timer once
// nothing is left to announce. Called under c.mu.
func (c *Cloud) dropArrival(m *machine, r *run) {
	key := r.runningAt.UnixNano()
	a := c.arrivals[key]
	if a == nil {
		return
	}
	a.entries = slices.DeleteFunc(a.entries, func(e arrivalEntry) bool { return e.r == r })
	if len(a.entries) == 0 {
		a.timer.Stop()
		delete(c.arrivals, key)
	}
}

// queueRunning queues the Running notice of r. Called under c.mu.
func (c *Cloud) queueRunning(m *machine, r *run) {
	r.announced = true
	inst := m.view(c.clk.Now())
	inst.State = domain.CloudRunning // as it was at runningAt, even if a stop is under way
	c.events = append(c.events, lifecycleEvent{inst: inst, id: m.inst.ID, at: r.runningAt})
}

// closeLifecycle cancels pending announcements and queues Halted for every
// machine announced as running. Called under c.mu before c.closed is set.
func (c *Cloud) closeLifecycle(now time.Time) {
	if c.opts.Lifecycle == nil {
		return
	}
	for key, a := range c.arrivals {
		a.timer.Stop()
		delete(c.arrivals, key)
	}
	for _, m := range c.sorted() {
		if r := m.run; r != nil && r.end.IsZero() {
			r.end = now
			if r.announced {
				c.events = append(c.events, lifecycleEvent{halted: true, id: m.inst.ID, at: now})
			}
		}
	}
	c.kick()
}

// kick makes sure queued events get delivered: by the goroutine delivering
// now, or by one scheduled on the clock. Called under c.mu.
func (c *Cloud) kick() {
	if c.delivering || c.kicked || len(c.events) == 0 {
		return
	}
	c.kicked = true
	c.clk.AfterFunc(0, func() {
		c.mu.Lock()
		c.kicked = false
		c.mu.Unlock()
		c.deliver()
	})
}

// deliver makes the queued Lifecycle calls, outside c.mu and one at a
// time, until the queue is empty. A second caller finding a delivery under
// way leaves its events to it.
func (c *Cloud) deliver() {
	c.mu.Lock()
	if c.delivering {
		c.mu.Unlock()
		return
	}
	c.delivering = true
	for len(c.events) > 0 {
		e := c.events[0]
		c.events[0] = lifecycleEvent{}
		c.events = c.events[1:]
		c.mu.Unlock()
		if e.halted {
			c.opts.Lifecycle.Halted(e.id, e.at)
		} else {
			c.opts.Lifecycle.Running(e.inst, e.at)
		}
		c.mu.Lock()
	}
	c.events = nil
	c.delivering = false
	c.mu.Unlock()
}
