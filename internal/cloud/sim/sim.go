// Package sim is an in-memory cloud that behaves like EC2 closely enough to
// develop, test and demonstrate bullpen without an account: machines move
// through EC2's states with configurable latencies on an injected clock, a
// simulated agent on each machine reports when warm-up is done (or, with
// Options.Lifecycle, full agents are told when machines run), and faults
// (throttling, failures, capacity limits, machines that never warm) can be
// injected deterministically. Every API call is counted by its EC2 operation
// name so tests can assert how bullpen batches its calls.
//
// State changes are computed lazily from timestamps: a machine created at t
// with a Boot latency of b reads as pending before t+b and running from t+b
// on, exactly, whenever it is looked at. Only the agents need timers, so the
// only timers the sim holds on the clock are pending warm signals, or with
// Options.Lifecycle, pending announcements of machines reaching running.
package sim

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// EC2 operation names, used as keys of Calls, MaxIDsPerCall, FailNext and
// Throttle.
const (
	OpCreateFleet        = ec2like.OpCreateFleet
	OpStartInstances     = ec2like.OpStartInstances
	OpStopInstances      = ec2like.OpStopInstances
	OpTerminateInstances = ec2like.OpTerminateInstances
	OpCreateTags         = ec2like.OpCreateTags
	OpDescribeInstances  = ec2like.OpDescribeInstances
	OpDescribeImages     = ec2like.OpDescribeImages
)

// Defaults for zero Options fields.
const (
	DefaultMaxPerCall          = ec2like.MaxPerCall
	DefaultSignalRetry         = time.Second
	DefaultTerminatedRetention = ec2like.DefaultTerminatedRetention
)

// Latency is how long each state change takes. Zero means the change is
// complete when the call returns.
type Latency struct {
	Boot      time.Duration // pending → running after Create
	Start     time.Duration // pending → running after Start
	Stop      time.Duration // stopping → stopped
	Terminate time.Duration // shutting-down → terminated
	WarmUp    time.Duration // running → warm signal sent, after every boot and start
}

// latency is the state changes' timings for machines of instance type
// itype.
func (o Options) latency(itype string) Latency {
	family, _, _ := strings.Cut(itype, ".")
	if l, ok := o.FamilyLatency[family]; ok {
		return l
	}
	return o.Latency
}

// Options configure a Cloud. The zero value is a usable, instant, unlimited
// cloud without signals.
type Options struct {
	Latency Latency
	// FamilyLatency overrides Latency for the instance types of a family
	// (the type's part before the dot: "m7a" for m7a.large).
	FamilyLatency map[string]Latency
	// MaxPerCall is the most ids (or machines, for Create) one call may
	// carry; larger calls are refused. Zero means DefaultMaxPerCall.
	MaxPerCall int
	// Capacity caps live (not terminated) machines; zero means unlimited.
	Capacity int
	// Images maps image names to ids; Create then refuses ids it never
	// held. When nil, every non-empty name resolves to an id derived from
	// the name and its generation, and Create takes any non-empty id.
	Images map[string]string
	// Signals receives the built-in agents' warm signals; nil sends none.
	// Ignored when Lifecycle is set.
	Signals domain.SignalSink
	// Lifecycle, when set, is told when each machine reaches running and
	// when it leaves it, so that agents simulated outside the sim (see
	// internal/simagent) live exactly as long as their machines run. It
	// replaces the built-in warm-only agent.
	Lifecycle Lifecycle
	// SignalRetry is how long the built-in agent waits after the sink
	// refuses a signal. Zero means DefaultSignalRetry.
	SignalRetry time.Duration
	// NeverWarmEvery makes every Nth created machine (the Nth, 2Nth, …)
	// never send its warm signal. Zero disables. Built-in agent only: with
	// Lifecycle, inject faults in the agents (simagent.Options).
	NeverWarmEvery int
	// TerminatedRetention is how long terminated machines stay listable by
	// id. Zero means DefaultTerminatedRetention.
	TerminatedRetention time.Duration
	// Seed makes the generated instance ids reproducible (tests). Zero, the
	// default, draws a random seed, so that like a real cloud the sim never
	// hands out an id it gave before: a control plane restarted on the same
	// store must not mistake a new machine for one it recorded before.
	Seed uint64
}

// Cloud is the simulated provider. It is safe for concurrent use.
type Cloud struct {
	clk  domain.Clock
	opts Options

	mu        sync.Mutex
	machines  map[string]*machine
	seq       int // machines ever created; orders listings
	capacity  int
	images    map[string]string // nil: derive ids from names
	imageGen  map[string]int    // releases per image name (PublishImage)
	imageIDs  map[string]bool   // every id images ever held, so rolled-over images still launch
	tokens    ec2like.Ledger
	calls     ec2like.Calls
	failures  map[string]*failure
	throttles map[string]*bucket
	closed    bool

	// Lifecycle notices (lifecycle.go).
	arrivals   map[int64]*arrival // pending announcements by UnixNano instant
	events     []lifecycleEvent   // queued, in the order they happened
	delivering bool               // a goroutine is delivering events
	kicked     bool               // a delivery is scheduled on the clock
}

var _ domain.Cloud = (*Cloud)(nil)

// machine is one simulated instance. next/nextAt hold the state change in
// flight, applied by settle once the clock reaches nextAt.
type machine struct {
	inst         domain.CloudInstance
	seq          int
	next         domain.CloudState
	nextAt       time.Time
	terminatedAt time.Time
	neverWarm    bool
	protected    bool // from termination (Protect)
	run          *run // the current or last stint of running
}

// New returns an empty cloud driven by clk.
func New(clk domain.Clock, opts Options) *Cloud {
	if opts.MaxPerCall <= 0 {
		opts.MaxPerCall = DefaultMaxPerCall
	}
	if opts.SignalRetry <= 0 {
		opts.SignalRetry = DefaultSignalRetry
	}
	if opts.TerminatedRetention <= 0 {
		opts.TerminatedRetention = DefaultTerminatedRetention
	}
	for opts.Seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails on supported platforms
		opts.Seed = binary.BigEndian.Uint64(b[:])
	}
	c := &Cloud{
		clk:       clk,
		opts:      opts,
		machines:  map[string]*machine{},
		capacity:  opts.Capacity,
		imageGen:  map[string]int{},
		imageIDs:  map[string]bool{},
		failures:  map[string]*failure{},
		throttles: map[string]*bucket{},
		arrivals:  map[int64]*arrival{},
	}
	if opts.Images != nil {
		c.images = make(map[string]string, len(opts.Images))
		for name, id := range opts.Images {
			c.images[name] = id
			c.imageIDs[id] = true
		}
	}
	return c
}

// Close stops every simulated agent; machines keep their states. With
// Options.Lifecycle, every machine announced as running is reported halted.
// Calls after Close still work, but no further signals or notices are sent.
func (c *Cloud) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	for _, m := range c.sorted() {
		m.run.stopTimer()
	}
	c.closeLifecycle(c.clk.Now())
	c.closed = true
}

// Calls returns how many times each operation was called, failed calls
// included.
func (c *Cloud) Calls() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls.Counts()
}

// MaxIDsPerCall returns, per operation, the most ids one call carried (the
// machine count for CreateFleet), refused calls included.
func (c *Cloud) MaxIDsPerCall() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls.MaxIDs()
}

// ResetCalls clears Calls and MaxIDsPerCall.
func (c *Cloud) ResetCalls() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls.Reset()
}

// Instances returns every machine the cloud still describes, terminated ones
// included, in creation order. It is not an API call and is not counted.
func (c *Cloud) Instances() []domain.CloudInstance {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clk.Now()
	c.purge(now)
	out := make([]domain.CloudInstance, 0, len(c.machines))
	for _, m := range c.sorted() {
		out = append(out, m.view(now))
	}
	return out
}

// Get returns one machine as the cloud currently describes it.
func (c *Cloud) Get(id string) (domain.CloudInstance, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clk.Now()
	c.purge(now)
	m, ok := c.machines[id]
	if !ok {
		return domain.CloudInstance{}, false
	}
	return m.view(now), true
}

// sorted returns the machines in creation order.
func (c *Cloud) sorted() []*machine { return ec2like.Sorted(c.machines) }

// purge forgets machines terminated longer than the retention ago.
func (c *Cloud) purge(now time.Time) {
	c.settle(now)
	ec2like.Purge(c.machines, c.opts.TerminatedRetention, now)
}

// live counts machines that hold capacity: everything not yet terminated.
func (c *Cloud) live(now time.Time) int {
	c.settle(now)
	return ec2like.Live(c.machines)
}

// settle applies every state change in flight whose time has come.
func (c *Cloud) settle(now time.Time) {
	for _, m := range c.machines {
		m.settle(now)
	}
}

// settle applies the state change in flight if its time has come.
func (m *machine) settle(now time.Time) {
	if m.next == "" || now.Before(m.nextAt) {
		return
	}
	m.inst.State = m.next
	if m.next == domain.CloudTerminated {
		m.terminatedAt = m.nextAt
	}
	m.next = ""
}

// begin moves m to state now and to next after d (at once when d is zero).
func (m *machine) begin(now time.Time, state, next domain.CloudState, d time.Duration) {
	m.inst.State, m.next, m.nextAt = state, next, now.Add(d)
	m.settle(now)
}

// view returns a copy of the machine as described at now.
func (m *machine) view(now time.Time) domain.CloudInstance {
	m.settle(now)
	return ec2like.Snapshot(m.inst)
}

// The machine as ec2like sees it, as last settled.
func (m *machine) Instance() *domain.CloudInstance { return &m.inst }
func (m *machine) Seq() int                        { return m.seq }
func (m *machine) TerminatedAt() time.Time         { return m.terminatedAt }
