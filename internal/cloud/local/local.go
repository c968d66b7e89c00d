// Package local is a compute provider whose machines are processes on this
// host: each "instance" is a `bullpen agent` child process with a directory
// of its own, so the whole system, agent included, runs end to end without
// a cloud account. It follows the EC2 semantics it shares with the
// simulated cloud (internal/cloud/ec2like: states, all-or-nothing batches,
// ClientToken idempotency, partial fulfilment under a Capacity) with real
// processes behind them:
//
//   - Create writes <Dir>/<id>/agent.env (the launch data, rendered by
//     internal/launchdata: the control plane's URL, the launch id, the
//     machine's own bootstrap secret derived from the launch's, never the
//     launch's itself, the cloud id and the agent's state directory) and
//     starts the machine's Command in a process group of its own, output
//     appended to <Dir>/<id>/agent.log.
//     Machines are spawned within the call, so Create returns them running.
//   - Stop sends SIGTERM to the machine's process group and SIGKILL after
//     StopGrace; the machine is stopping until every process of the group
//     is gone, then stopped. Its directory, and so the agent's saved token,
//     is kept.
//   - Start runs the Command again from the same directory: running.
//   - Terminate halts the group the same way, removes the directory and
//     leaves the machine terminated, listable by id for
//     TerminatedRetention, as on EC2.
//   - A machine whose process exits on its own (its agent shut the machine
//     down, or crashed) is stopped, as an EC2 instance whose operating
//     system halts: what is left of its group is halted, and Start brings
//     it back.
//
// Close terminates every machine and waits for every process, so nothing
// outlives the control plane or the test that made the Cloud. On Linux the
// processes of a temporary Dir's machines are also sent SIGTERM when this
// process ends without Close (a crash, SIGKILL): their parent-death signal,
// which they get from a thread kept for starting them, since Linux sends it
// when the starting thread ends. Elsewhere they outlive such an end.
//
// # Machines on disk
//
// Machines outlive the Cloud that made them when it crashes: each machine
// directory holds machine.json (RecordFile), the provider's record of the
// machine, replaced whole (a temporary file renamed over it, mode 0600) on
// every change. It is a JSON object (Record):
//
//	id             the cloud id, the name of the directory: letters,
//	               digits and "._-", not starting with "."
//	state          "pending", "running", "stopping", "stopped",
//	               "shutting-down" or "terminated"; absent means running
//	               when pid is set, stopped otherwise
//	tags           an object of string values
//	instance_type  absent means InstanceType
//	usage_class    absent means UsageClass
//	launched_at    RFC 3339; absent means the moment of adoption
//	pid            the machine's process, which leads a process group of
//	               its own; absent or 0 when the machine has none, or its
//	               process started after the record was written (a record
//	               is written before the process starts, and again with
//	               its pid): then the oldest live group leader that started
//	               with MachineEnv set to the machine's id is taken as the
//	               machine's process
//	start_time     the process's start, field 22 of /proc/<pid>/stat, so
//	               that a later process reusing the pid is not taken for
//	               it; absent means a process is the machine's only when
//	               an argument of its command line holds the path of the
//	               machine's agent.env
//
// New adopts every machine recorded in Dir (a temporary Dir has none),
// and List, and every call naming ids, adopt those recorded since, so that
// a machine created behind the provider's back, by another process
// writing <Dir>/<id>/machine.json and starting its process, becomes
// visible and can be reconciled. An adopted machine whose
// recorded process still runs is running (or goes on stopping, or
// terminating, as recorded); one whose process is gone is stopped, what
// is left of its process group halted first; one recorded as terminating
// is terminated. Its processes are not this process's children: the Cloud
// polls for them to be gone, and halts and reaps them as its own, Close
// included. A directory whose record cannot be read or makes no sense is
// skipped with a warning; one without a record is not a machine.
//
// While a Cloud is open it holds an exclusive lock (flock) on Dir, so two
// control planes never manage one directory's machines; a crashed one
// holds it no more.
package local

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launchdata"
)

// Defaults for zero Options fields.
const (
	DefaultStopGrace           = 10 * time.Second
	DefaultTerminatedRetention = ec2like.DefaultTerminatedRetention
)

// MaxPerCall is the most machines one Create, or ids one batch call, may
// carry, as on EC2.
const MaxPerCall = ec2like.MaxPerCall

// InstanceType and UsageClass describe every local machine.
const (
	InstanceType = "local.process"
	UsageClass   = "on-demand"
)

// ErrClosed is wrapped by the error of Create and Start after Close.
var ErrClosed = errors.New("local cloud closed")

// Machine is one local instance as its Command sees it.
type Machine struct {
	ID       string // the cloud id, "l-" and 12 hex digits
	Dir      string // <Options.Dir>/<ID>, the machine's own directory
	EnvFile  string // <Dir>/agent.env, the launch data (mode 0600)
	StateDir string // <Dir>/state, where the agent keeps its token
	LogFile  string // <Dir>/agent.log, the process's output by default
}

// Options configure a Cloud. The zero value runs this executable's
// `agent` command in a temporary directory, without a capacity limit.
type Options struct {
	// Command makes the process a machine runs, each time it starts. The
	// Cloud puts it in its own process group and fills in what is left
	// unset: Dir (the machine's directory), Stdout and Stderr (appended
	// to LogFile) and Env (a minimal environment: PATH, HOME set to the
	// machine's directory, TMPDIR and TZ when set), so that no secret of
	// the control plane's environment reaches a machine. Nil means
	// `Binary agent --config <EnvFile>`. It is called with the Cloud's
	// lock held and must not call the Cloud.
	Command func(m Machine) *exec.Cmd
	// Binary is the executable of the default Command; empty means this
	// process's own executable.
	Binary string
	// Dir holds a directory per machine. Empty means a temporary
	// directory, removed by Close.
	Dir string
	// KeepOnClose makes Close leave the machines as they are, processes
	// running, for the next Cloud on Dir to adopt, as a cloud's machines
	// outlive a restart of their control plane (a job running on one goes
	// on). It has no effect with a temporary Dir, whose machines go with
	// it.
	KeepOnClose bool
	// Capacity caps live (not terminated) machines; zero means unlimited.
	Capacity int
	// StopGrace is how long a process group has after SIGTERM before it
	// gets SIGKILL, on the wall clock (processes live in real time).
	// Zero means DefaultStopGrace.
	StopGrace time.Duration
	// TerminatedRetention is how long, on Clock, terminated machines stay
	// listable by id. Zero means DefaultTerminatedRetention.
	TerminatedRetention time.Duration
	// Clock stamps LaunchedAt and measures TerminatedRetention; nil means
	// the wall clock.
	Clock domain.Clock
	// Log receives machine events; nil means slog.Default().
	Log *slog.Logger
	// AgentEnv adds settings to every machine's launch data (for example
	// BULLPEN_AGENT_RUNNER_COMMAND, so a test can run a fake runner). New
	// refuses what no launch data can hold, and the settings the Cloud
	// writes for each machine itself (its cloud id and state directory).
	AgentEnv map[string]string
}

// checkAgentEnv says why env cannot be added to every machine's launch
// data, naming each setting at fault.
func checkAgentEnv(env map[string]string) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if k == launchdata.EnvCloudID || k == launchdata.EnvStateDir {
			errs = append(errs, fmt.Errorf("agent setting %s: set by the provider for each machine", k))
		}
	}
	if _, err := launchdata.EnvFile(domain.AgentBootstrap{}, env); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Cloud is the local provider. It is safe for concurrent use.
type Cloud struct {
	opts    Options
	clk     domain.Clock
	log     *slog.Logger
	ownsDir bool
	lock    *os.File // holds the lock on Dir

	mu       sync.Mutex
	machines map[string]*machine
	seq      int
	tokens   ec2like.Ledger
	calls    ec2like.Calls
	skipped  map[string]string // directories of Dir not adopted, and why
	closed   bool
	// detached: Close left the machines to the next Cloud on Dir; nothing
	// of this one touches them or their records again.
	detached bool
	gone     chan struct{} // closed when detached
	changed  chan struct{} // closed and replaced whenever a machine settles
	workers  sync.WaitGroup
}

var _ domain.Cloud = (*Cloud)(nil)

// New returns a Cloud, its directory created and locked, that has adopted
// every machine recorded in Dir.
func New(opts Options) (*Cloud, error) {
	if opts.StopGrace <= 0 {
		opts.StopGrace = DefaultStopGrace
	}
	if opts.TerminatedRetention <= 0 {
		opts.TerminatedRetention = DefaultTerminatedRetention
	}
	if opts.Capacity < 0 {
		return nil, fmt.Errorf("local cloud: capacity %d is negative", opts.Capacity)
	}
	if err := checkAgentEnv(opts.AgentEnv); err != nil {
		return nil, fmt.Errorf("local cloud: %w", err)
	}
	c := &Cloud{
		opts:     opts,
		clk:      opts.Clock,
		log:      opts.Log,
		machines: map[string]*machine{},
		skipped:  map[string]string{},
		changed:  make(chan struct{}),
		gone:     make(chan struct{}),
	}
	if c.clk == nil {
		c.clk = clock.Real{}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.opts.Command == nil {
		if err := c.useDefaultCommand(); err != nil {
			return nil, err
		}
	}
	if err := c.makeDir(); err != nil {
		return nil, err
	}
	lock, err := lockDir(c.opts.Dir)
	if err != nil {
		if c.ownsDir {
			_ = os.RemoveAll(c.opts.Dir)
		}
		return nil, err
	}
	c.lock = lock
	if !c.ownsDir {
		c.mu.Lock()
		c.discover()
		c.mu.Unlock()
	}
	return c, nil
}

func (c *Cloud) useDefaultCommand() error {
	bin := c.opts.Binary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("local cloud: find the bullpen executable: %w", err)
		}
		bin = exe
	}
	c.opts.Command = func(m Machine) *exec.Cmd {
		return exec.Command(bin, "agent", "--config", m.EnvFile)
	}
	return nil
}

func (c *Cloud) makeDir() error {
	if c.opts.Dir == "" {
		dir, err := os.MkdirTemp("", "bullpen-local-")
		if err != nil {
			return fmt.Errorf("local cloud: make a work directory: %w", err)
		}
		c.opts.Dir, c.ownsDir = dir, true
		return nil
	}
	if err := os.MkdirAll(c.opts.Dir, 0o700); err != nil {
		return fmt.Errorf("local cloud: make the work directory: %w", err)
	}
	return nil
}

// Dir is the directory that holds the machines' directories.
func (c *Cloud) Dir() string { return c.opts.Dir }

// Close terminates every machine, those recorded in Dir behind its back
// included, and returns once every process of every machine is gone.
// Create and Start fail afterwards; the other calls still answer, but
// adopt nothing. The lock on Dir is released; a temporary Dir is removed.
// With KeepOnClose (and a Dir of the caller's), Close leaves the machines
// running instead (see detach), and every call fails afterwards.
func (c *Cloud) Close() error {
	if c.opts.KeepOnClose && !c.ownsDir {
		return c.detach()
	}
	c.mu.Lock()
	if !c.closed {
		c.discover()
		c.closed = true
		for _, m := range c.sorted() {
			if ec2like.TerminateRules.Changes(m.inst.State) {
				c.terminate(m)
			}
		}
	}
	c.mu.Unlock()
	c.workers.Wait()
	c.mu.Lock()
	lock := c.lock
	c.lock = nil
	c.mu.Unlock()
	if lock != nil {
		_ = lock.Close() // releases the lock
	}
	if c.ownsDir {
		if err := os.RemoveAll(c.opts.Dir); err != nil {
			return fmt.Errorf("local cloud: remove the work directory: %w", err)
		}
	}
	return nil
}

// detach is Close for KeepOnClose: the machines and their records stay as
// they are and the lock on Dir is released, so the next Cloud on Dir adopts
// them. What was under way stays recorded (a machine stopping or
// terminating is recorded so, and the next Cloud finishes it); a process
// that exits from now on is left for that Cloud to find gone. The
// watchers of processes this Cloud started stay blocked until those
// processes end, or this process does.
func (c *Cloud) detach() error {
	c.mu.Lock()
	if !c.closed {
		c.closed, c.detached = true, true
		close(c.gone)
		kept := 0
		for _, m := range c.machines {
			if m.proc != nil {
				kept++
			}
		}
		c.log.Info("local cloud closed; its machines keep running for the next control plane on the directory",
			"dir", c.opts.Dir, "processes", kept)
	}
	lock := c.lock
	c.lock = nil
	c.mu.Unlock()
	if lock != nil {
		_ = lock.Close()
	}
	return nil
}

// Calls returns how many times each operation was called, failed calls
// included.
func (c *Cloud) Calls() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls.Counts()
}

// PID returns the process id of a running machine's process (the leader of
// its process group, whose id is the same), so that a test can kill an
// agent behind the provider's back.
func (c *Cloud) PID(id string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.machines[id]
	if !ok || m.proc == nil || m.inst.State != domain.CloudRunning {
		return 0, false
	}
	return m.proc.pgid, true
}

// Machine returns the paths of the machine with that id.
func (c *Cloud) Machine(id string) (Machine, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.machines[id]
	if !ok {
		return Machine{}, false
	}
	return m.paths, true
}

// settled wakes everyone waiting for a machine to change. Called under c.mu.
func (c *Cloud) settled() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// sorted returns the machines in creation order. Called under c.mu.
func (c *Cloud) sorted() []*machine { return ec2like.Sorted(c.machines) }
