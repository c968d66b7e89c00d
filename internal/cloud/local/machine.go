package local

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launchdata"
)

// machine is one local instance. proc is its process while it has one:
// from spawn (or adoption) until its group has drained.
type machine struct {
	seq          int
	inst         domain.CloudInstance
	paths        Machine
	proc         *process
	removing     bool // its directory is being removed: never write its record again
	terminatedAt time.Time
}

// process is one run of a machine's Command: the leader of a process group
// whose id is the leader's pid. cmd is nil for a process this Cloud adopted
// rather than started, which it cannot wait for.
type process struct {
	cmd       *exec.Cmd
	pgid      int
	startTime uint64        // the leader's, from /proc; 0 when unknown
	halting   bool          // SIGTERM sent to the group
	halted    chan struct{} // closed when halting starts
	kill      *time.Timer   // SIGKILL after the grace period
	drained   bool          // the group is gone; never signal it again
}

func newProcess(cmd *exec.Cmd, pgid int, startTime uint64) *process {
	return &process{cmd: cmd, pgid: pgid, startTime: startTime, halted: make(chan struct{})}
}

// machinePaths names the files of the machine id in dir.
func machinePaths(dir, id string) Machine {
	mdir := filepath.Join(dir, id)
	return Machine{
		ID:       id,
		Dir:      mdir,
		EnvFile:  filepath.Join(mdir, "agent.env"),
		StateDir: filepath.Join(mdir, "state"),
		LogFile:  filepath.Join(mdir, "agent.log"),
	}
}

// view returns a copy of the machine as the provider describes it.
func (m *machine) view() domain.CloudInstance { return ec2like.Snapshot(m.inst) }

// The machine as ec2like sees it.
func (m *machine) Instance() *domain.CloudInstance { return &m.inst }
func (m *machine) Seq() int                        { return m.seq }
func (m *machine) TerminatedAt() time.Time         { return m.terminatedAt }

// newMachine reserves an id and prepares the machine's directory and launch
// data. Called under c.mu.
func (c *Cloud) newMachine(spec domain.LaunchSpec, now time.Time) (*machine, error) {
	id, err := c.reserveID()
	if err != nil {
		return nil, err
	}
	paths := machinePaths(c.opts.Dir, id)
	dir := paths.Dir
	if err := os.Mkdir(paths.StateDir, 0o700); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("make the directory of %s: %w", id, err)
	}
	extra := map[string]string{}
	for k, v := range c.opts.AgentEnv {
		extra[k] = v
	}
	extra[launchdata.EnvCloudID], extra[launchdata.EnvStateDir] = id, paths.StateDir
	// Each machine is started on its own: it gets its own secret, never
	// the launch's, so it cannot introduce itself as a sibling. A launch
	// without a secret gives none: one derived from nothing but the id
	// would be anyone's.
	agent := spec.Agent
	if agent.Secret != "" {
		agent.Secret = domain.MachineSecret(agent.Secret, id)
	}
	env, err := launchdata.EnvFile(agent, extra)
	if err == nil {
		err = writeEnvFile(paths.EnvFile, env)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("write the launch data of %s: %w", id, err)
	}
	c.seq++
	return &machine{
		seq:   c.seq,
		paths: paths,
		inst: domain.CloudInstance{
			ID:           id,
			State:        domain.CloudPending,
			Tags:         ec2like.CloneTags(spec.Tags),
			InstanceType: InstanceType,
			UsageClass:   UsageClass,
			LaunchedAt:   now,
		},
	}, nil
}

// reserveID returns an unused id shaped like "l-0123456789ab" and makes its
// directory. The directory is made exclusively: one made behind the
// Cloud's back, and not adopted yet, keeps its id. Called under c.mu.
func (c *Cloud) reserveID() (string, error) {
	for {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("make an instance id: %w", err)
		}
		id := "l-" + hex.EncodeToString(b[:])
		if _, taken := c.machines[id]; taken {
			continue
		}
		err := os.Mkdir(filepath.Join(c.opts.Dir, id), 0o700)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("make the directory of %s: %w", id, err)
		}
		return id, nil
	}
}

// spawn starts the machine's Command and moves the machine to running; on
// failure the machine is left as it was. Called under c.mu.
func (c *Cloud) spawn(m *machine) error {
	cmd := c.opts.Command(m.paths)
	if cmd == nil {
		return fmt.Errorf("start %s: the Command made no process", m.inst.ID)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Its own group, so that halting the machine reaches every process
	// it started (the runner and its jobs), and a signal meant for the
	// control plane's group does not.
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
	if cmd.Dir == "" {
		cmd.Dir = m.paths.Dir
	}
	if cmd.Env == nil {
		cmd.Env = machineEnv(m.paths)
	}
	cmd.Env = append(cmd.Env, MachineEnv+"="+m.inst.ID)
	logFile, err := c.attachLog(cmd, m.paths)
	if err != nil {
		return err
	}
	if c.ownsDir {
		// A temporary directory's machines end with this process, however
		// it ends; those of a Dir of the caller's are meant to outlive it.
		err = startTied(cmd)
	} else {
		err = cmd.Start()
	}
	if logFile != nil {
		_ = logFile.Close() // the child holds its own copy
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", m.inst.ID, err)
	}
	// Read before watch can reap it, so the pid names a process still.
	info, _ := readProcStat(cmd.Process.Pid)
	p := newProcess(cmd, cmd.Process.Pid, info.startTime)
	m.proc = p
	m.inst.State = domain.CloudRunning
	c.log.Debug("local machine started", "instance", m.inst.ID, "pid", p.pgid)
	c.workers.Add(1)
	go c.watch(m, p)
	return nil
}

// attachLog points the unset output streams of cmd at the machine's log.
func (c *Cloud) attachLog(cmd *exec.Cmd, paths Machine) (*os.File, error) {
	if cmd.Stdout != nil && cmd.Stderr != nil {
		return nil, nil
	}
	f, err := os.OpenFile(paths.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the log of %s: %w", paths.ID, err)
	}
	if cmd.Stdout == nil {
		cmd.Stdout = f
	}
	if cmd.Stderr == nil {
		cmd.Stderr = f
	}
	return f, nil
}

// MachineEnv names the variable every machine's process starts with, set to
// its machine's id: it is how a process whose pid was never recorded (its
// provider killed between starting it and writing the pid) is told from
// any other process of the user, say an operator's shell in the machine's
// directory, so that adoption signals only machines. Children inherit it,
// so the oldest group leader holding it is the machine's process.
const MachineEnv = "BULLPEN_LOCAL_MACHINE"

// machineEnv is the environment of a process whose Command left Env unset:
// enough to find programs, and nothing of the control plane's secrets.
func machineEnv(paths Machine) []string {
	env := []string{"HOME=" + paths.Dir}
	for _, k := range []string{"PATH", "TMPDIR", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// halt asks the machine's process group to end: SIGTERM now, SIGKILL once
// StopGrace has passed. Asking again changes nothing. Called under c.mu.
func (c *Cloud) halt(m *machine, p *process) {
	if p.halting {
		return
	}
	p.halting = true
	close(p.halted)
	signalGroup(p.pgid, syscall.SIGTERM)
	p.kill = time.AfterFunc(c.opts.StopGrace, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if p.drained || c.detached {
			return // a detached Cloud's halts are the next one's to finish
		}
		c.log.Warn("local machine did not halt within its grace period; killing it",
			"instance", m.inst.ID, "grace", c.opts.StopGrace)
		signalGroup(p.pgid, syscall.SIGKILL)
	})
}

// watch follows one process from start to finish: it reaps the leader,
// halts whatever is left of its group, waits for the group to drain and
// settles the machine as stopped, or terminated when that was asked for.
func (c *Cloud) watch(m *machine, p *process) {
	defer c.workers.Done()
	c.drain(m, p, exitText(p.cmd.Wait()))
}

// drain settles a machine whose process leader is gone, or is being
// halted: whatever is left of the group is halted and waited for, then the
// machine is stopped, or terminated when that was asked for. exit says how
// the leader ended.
func (c *Cloud) drain(m *machine, p *process, exit string) {
	c.mu.Lock()
	if c.detached {
		c.mu.Unlock()
		return // the next Cloud on Dir finds what became of it
	}
	if m.inst.State == domain.CloudRunning {
		// Nobody asked: the agent shut the machine down, or crashed.
		c.log.Info("local machine halted on its own", "instance", m.inst.ID, "exit", exit)
		m.inst.State = domain.CloudStopping
		_ = c.save(m)
	}
	c.halt(m, p)
	c.mu.Unlock()

	if !waitGroupGone(p.pgid, c.opts.StopGrace+groupKillWait) {
		c.log.Warn("local machine: processes of its group survived SIGKILL; giving up on them",
			"instance", m.inst.ID, "pgid", p.pgid)
	}

	c.mu.Lock()
	if c.detached {
		c.mu.Unlock()
		return
	}
	p.drained = true
	p.kill.Stop()
	m.proc = nil
	if m.inst.State != domain.CloudShuttingDown {
		m.inst.State = domain.CloudStopped
		_ = c.save(m)
		c.settled()
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.finishTermination(m)
}

// terminate moves a machine on its way out: its processes are halted, or,
// when it has none, its directory is removed at once. Called under c.mu.
func (c *Cloud) terminate(m *machine) {
	m.inst.State = domain.CloudShuttingDown
	_ = c.save(m)
	if m.proc != nil {
		c.halt(m, m.proc)
		return
	}
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		c.finishTermination(m)
	}()
}

// finishTermination removes the machine's directory, then marks it
// terminated.
func (c *Cloud) finishTermination(m *machine) {
	c.mu.Lock()
	m.removing = true
	c.mu.Unlock()
	if err := os.RemoveAll(m.paths.Dir); err != nil {
		c.log.Warn("local machine: remove its directory", "instance", m.inst.ID, "err", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m.inst.State = domain.CloudTerminated
	m.terminatedAt = c.clk.Now()
	c.settled()
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}
