// Package simagent simulates bullpen's on-instance agent on every machine of
// the simulated cloud, so that the control plane's handshakes (warm-up,
// heartbeats, registration, job progress, release) run end to end without
// real machines.
//
// A Fleet follows the machines through sim.Lifecycle: when a machine reaches
// running its agent starts (heartbeats, warm-up, then asking the control
// plane what to do), and when the machine stops or is terminated the agent
// dies with it. The agent talks to the control plane through
// domain.AgentAPI, exactly as the real agent does over HTTP, and serves jobs
// through a RunnerHost standing in for GitHub's runner service.
//
// Everything happens in callbacks of the injected clock; nothing sleeps. On
// clock.Virtual, advancing to each due timer and calling Settle makes a run
// reproducible, and every signal carries the virtual instant it was due.
package simagent

import (
	"context"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// RunnerHost is GitHub's side of a runner: it takes a just-in-time config
// and gives the runner its job.
type RunnerHost interface {
	// RunJIT starts a runner from a just-in-time config; GitHub gives it its
	// job: onStart(jobID) when the job starts, onDone(jobID, conclusion)
	// when it ends. Error for a config GitHub refuses. The context is the
	// runner process's life: it ends when the agent deregisters the runner
	// on release, and when the agent dies (machine halted, crash, Close).
	RunJIT(ctx context.Context, jitConfig string, onStart func(jobID int64),
		onDone func(jobID int64, conclusion string)) error
}

// Defaults for zero Options fields.
const (
	DefaultHeartbeatEvery  = 5 * time.Second
	DefaultPollEvery       = 2 * time.Second
	DefaultRegisterDelay   = 2 * time.Second
	DefaultDeregisterDelay = time.Second
	DefaultRetryEvery      = time.Second
)

// Options tune the simulated agents. For the durations with a default,
// zero means the default and a negative value means no delay at all.
type Options struct {
	// HeartbeatEvery is the heartbeat period; the first is sent as the
	// machine starts running.
	HeartbeatEvery time.Duration
	// WarmUp is how long after reaching running the agent reports warm.
	// Zero means at once (it has no default).
	WarmUp time.Duration
	// RestartWarmUp replaces WarmUp for every run after a machine's first
	// (a stopped machine started again is already warm: its disk is
	// pulled and its setup done). Zero means WarmUp; negative means none.
	RestartWarmUp time.Duration
	// FamilyWarmUp overrides WarmUp for the instance types of a family
	// (the type's part before the dot).
	FamilyWarmUp map[string]time.Duration
	// PollEvery is how often a waiting agent asks again when no
	// notification wakes it.
	PollEvery time.Duration
	// RegisterDelay is how long registering a runner takes, from the run
	// instruction to the registered signal.
	RegisterDelay time.Duration
	// DeregisterDelay is how long deregistering and cleaning up take, from
	// the release instruction to the deregistered signal.
	DeregisterDelay time.Duration
	// RetryEvery is the wait after the control plane refuses a signal or
	// fails to answer.
	RetryEvery time.Duration
	// NeverWarmEvery makes the agent of every Nth machine (counted in the
	// order the fleet first sees them running) never report warm.
	NeverWarmEvery int
	// FailRegistrationEvery makes every Nth machine (same count) fail
	// every registration.
	FailRegistrationEvery int
	Log                   *slog.Logger // nil discards
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			*d = 0
		}
	}
	def(&o.HeartbeatEvery, DefaultHeartbeatEvery)
	def(&o.PollEvery, DefaultPollEvery)
	def(&o.RegisterDelay, DefaultRegisterDelay)
	def(&o.DeregisterDelay, DefaultDeregisterDelay)
	def(&o.RetryEvery, DefaultRetryEvery)
	// Periodic actions with no period would spin.
	o.HeartbeatEvery = max(o.HeartbeatEvery, time.Millisecond)
	o.PollEvery = max(o.PollEvery, time.Millisecond)
	o.RetryEvery = max(o.RetryEvery, time.Millisecond)
	o.WarmUp = max(o.WarmUp, 0)
	switch {
	case o.RestartWarmUp == 0:
		o.RestartWarmUp = o.WarmUp
	case o.RestartWarmUp < 0:
		o.RestartWarmUp = 0
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// InjectedRegistrationFailure is the reason FailRegistrationEvery reports.
const InjectedRegistrationFailure = "injected registration failure"

// Fleet is the simulated agents of all machines. It is safe for concurrent
// use.
type Fleet struct {
	clk  domain.Clock
	api  domain.AgentAPI
	host RunnerHost
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	machines map[string]*machine
	seen     int // machines ever seen running, for the Every options
	closed   bool
	stats    Stats
}

var (
	_ sim.Lifecycle             = (*Fleet)(nil)
	_ domain.AssignmentNotifier = (*Fleet)(nil)
)

// machine is what the fleet keeps about one machine across its runs: the
// injected faults, and the agent of the current run.
type machine struct {
	id            string
	neverWarm     bool
	failReason    string // non-empty: every registration fails so
	silent        bool
	registerDelay time.Duration
	delaySet      bool
	counted       bool   // numbered for the Every options
	runs          int    // agent runs started on this machine
	family        string // of its instance type
	agent         *agent // nil while the machine is not running, or the agent crashed
}

// Stats counts what the agents did. Signals and heartbeats count the calls
// the control plane accepted; refusals count the ones it did not.
type Stats struct {
	Runs            int // agent runs started (machine boots and starts)
	Signals         map[domain.SignalKind]int
	Refused         map[domain.SignalKind]int // refused for now: retried
	Rejected        map[domain.SignalKind]int // refused for good: dropped
	Heartbeats      int
	HeartbeatErrors int
	NextCalls       int
}

// New returns a fleet whose agents talk to api and run jobs on host. Pass
// it to the simulated cloud as sim.Options.Lifecycle, and to the control
// plane as its AssignmentNotifier.
func New(clk domain.Clock, api domain.AgentAPI, host RunnerHost, opts Options) *Fleet {
	opts = opts.withDefaults()
	return &Fleet{
		clk: clk, api: api, host: host, opts: opts, log: opts.Log,
		machines: map[string]*machine{},
		stats: Stats{
			Signals:  map[domain.SignalKind]int{},
			Refused:  map[domain.SignalKind]int{},
			Rejected: map[domain.SignalKind]int{},
		},
	}
}

// Running starts a fresh agent on m, as the machine boots at at.
func (f *Fleet) Running(m domain.CloudInstance, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	mc := f.machine(m.ID)
	mc.family, _, _ = strings.Cut(m.InstanceType, ".")
	if !mc.counted {
		mc.counted = true
		f.count(mc)
	}
	if mc.agent != nil {
		mc.agent.kill() // a Running without its Halted: the old agent cannot survive a reboot
	}
	f.stats.Runs++
	mc.runs++
	a := newAgent(f, mc)
	mc.agent = a
	a.start(at)
}

// Halted kills the machine's agent: no timer of it fires and it sends
// nothing more.
func (f *Fleet) Halted(cloudID string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if mc := f.machines[cloudID]; mc != nil && mc.agent != nil {
		mc.agent.kill()
		mc.agent = nil
	}
}

// Assigned wakes the machine's agent if it is waiting for an instruction.
func (f *Fleet) Assigned(cloudID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if mc := f.machines[cloudID]; mc != nil && mc.agent != nil {
		mc.agent.wake()
	}
}

// Close kills every agent; later lifecycle calls are ignored.
func (f *Fleet) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for _, mc := range f.machines {
		if mc.agent != nil {
			mc.agent.kill()
			mc.agent = nil
		}
	}
}

// Stats returns a copy of the counters.
func (f *Fleet) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.Signals = maps.Clone(f.stats.Signals)
	s.Refused = maps.Clone(f.stats.Refused)
	s.Rejected = maps.Clone(f.stats.Rejected)
	return s
}

// machine returns the record of id, creating it the first time. Called
// under f.mu.
func (f *Fleet) machine(id string) *machine {
	if mc := f.machines[id]; mc != nil {
		return mc
	}
	mc := &machine{id: id}
	f.machines[id] = mc
	return mc
}

// count numbers a machine the first time it runs, for the Every options.
// Called under f.mu.
func (f *Fleet) count(mc *machine) {
	f.seen++
	if n := f.opts.NeverWarmEvery; n > 0 && f.seen%n == 0 {
		mc.neverWarm = true
	}
	if n := f.opts.FailRegistrationEvery; n > 0 && f.seen%n == 0 && mc.failReason == "" {
		mc.failReason = InjectedRegistrationFailure
	}
}
