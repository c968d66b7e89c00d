package local

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// adoptedPoll is how often the Cloud looks whether an adopted process still
// runs: it is not this process's child, so nothing tells it when it exits.
const adoptedPoll = 200 * time.Millisecond

// liveness is what is left of a machine's recorded process.
type liveness int

const (
	procNone      liveness = iota // nothing of it runs, or its pid names another process now
	procLeader                    // the recorded process runs, leading its group
	procLeftovers                 // the leader is gone; other processes of its group run
)

// adoptedState is the state a recorded machine is adopted in: the record
// says what was asked of it (run, stop, terminate), what is left of its
// process says how far that got. A machine being stopped or terminated goes
// on with it; a stopped one found running is stopped again; leftovers of a
// running one are halted as the remains of a machine whose process exited
// on its own (its watcher does that).
func adoptedState(recorded domain.CloudState, live liveness) domain.CloudState {
	switch {
	case recorded == domain.CloudShuttingDown || recorded == domain.CloudTerminated:
		return domain.CloudShuttingDown
	case live == procNone:
		return domain.CloudStopped
	case recorded == domain.CloudStopping || recorded == domain.CloudStopped:
		return domain.CloudStopping
	default:
		return domain.CloudRunning
	}
}

// inspectProcess finds what is left of a record's process. The pid alone
// proves nothing: after a reboot or enough forks it names another process,
// which must not be signalled. The recorded start time (or, without one, a
// command line naming the machine's env file) tells them apart; a process
// group outliving its leader keeps the leader's pid in use, so its
// leftovers are the machine's. note says why a live pid was not taken.
func inspectProcess(rec Record, envFile string) (live liveness, startTime uint64, note string) {
	if rec.PID == 0 {
		return procNone, 0, ""
	}
	if !haveProc() {
		return procNone, 0, "no /proc to tell whether the recorded process is still the machine's"
	}
	info, ok := readProcStat(rec.PID)
	if ok {
		same := info.startTime == rec.StartTime
		if rec.StartTime == 0 {
			same = cmdlineHas(rec.PID, envFile)
		}
		switch {
		case !same:
			return procNone, 0, "its pid belongs to another process now"
		case !info.dead() && info.pgid != rec.PID:
			return procNone, 0, "its process does not lead its own process group"
		case !info.dead():
			return procLeader, info.startTime, ""
		}
	}
	if groupAlive(rec.PID) {
		return procLeftovers, 0, ""
	}
	return procNone, 0, ""
}

// discover adopts every machine recorded in Dir that this Cloud does not
// know, in launch order. Called under c.mu.
func (c *Cloud) discover() {
	if c.closed {
		return // no new watchers once Close has waited for them
	}
	entries, err := os.ReadDir(c.opts.Dir)
	if err != nil {
		c.log.Warn("local cloud: read the work directory", "dir", c.opts.Dir, "err", err)
		return
	}
	var found []Record
	for _, e := range entries {
		if _, known := c.machines[e.Name()]; known || !e.IsDir() || !validID(e.Name()) {
			continue
		}
		if rec, ok := c.readForAdoption(e.Name()); ok {
			found = append(found, rec)
		}
	}
	slices.SortFunc(found, func(a, b Record) int {
		if n := a.LaunchedAt.Compare(b.LaunchedAt); n != 0 {
			return n
		}
		return cmp.Compare(a.ID, b.ID)
	})
	leaders := sync.OnceValue(unrecordedLeaders)
	for _, rec := range found {
		c.adopt(rec, leaders)
	}
}

// adoptID adopts the machine id if Dir records it. Called under c.mu.
func (c *Cloud) adoptID(id string) *machine {
	if c.closed || !validID(id) {
		return nil
	}
	if _, known := c.machines[id]; known {
		return nil
	}
	rec, ok := c.readForAdoption(id)
	if !ok {
		return nil
	}
	return c.adopt(rec, unrecordedLeaders)
}

// readForAdoption reads the record of the directory name. A directory
// without one is not a machine (or not yet: its record is being written);
// one with a record that cannot be used is skipped with a warning, once
// for each version of the record. Called under c.mu.
func (c *Cloud) readForAdoption(name string) (Record, bool) {
	rec, err := readRecord(filepath.Join(c.opts.Dir, name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Record{}, false
	case err != nil:
		c.skip(name, err)
		return Record{}, false
	}
	delete(c.skipped, name)
	return rec.withDefaults(c.clk.Now()), true
}

// skip warns that a directory of Dir cannot be adopted, unless it warned
// the same about the same version of it already. Called under c.mu.
func (c *Cloud) skip(name string, err error) {
	key := err.Error()
	if info, serr := os.Stat(filepath.Join(c.opts.Dir, name, RecordFile)); serr == nil {
		key += "@" + info.ModTime().String()
	}
	if c.skipped[name] == key {
		return
	}
	c.skipped[name] = key
	c.log.Warn("local cloud: skipping a directory that holds no usable machine record",
		"dir", filepath.Join(c.opts.Dir, name), "err", err)
}

// adopt makes a recorded machine one of this Cloud's: its process, if it
// still runs, is watched (and halted, if it was being stopped or
// terminated), and its record rewritten as adopted. A record without a pid
// may have been written just before its process started, by a control plane
// that died before it could record the pid: leaders finds such a process,
// which would otherwise run on, unwatched, as a machine listed stopped.
// Called under c.mu.
func (c *Cloud) adopt(rec Record, leaders func() map[string]leaderRef) *machine {
	paths := machinePaths(c.opts.Dir, rec.ID)
	found := ""
	if rec.PID == 0 {
		if l, ok := leaders()[rec.ID]; ok {
			rec.PID, rec.StartTime = l.pid, l.startTime
			found = "its pid was not recorded; found by its " + MachineEnv
		}
	}
	live, startTime, note := inspectProcess(rec, paths.EnvFile)
	if note == "" {
		note = found
	}
	state := adoptedState(rec.State, live)
	c.seq++
	m := &machine{
		seq:   c.seq,
		paths: paths,
		inst: domain.CloudInstance{
			ID: rec.ID, State: state, Tags: ec2like.CloneTags(rec.Tags), LaunchedAt: rec.LaunchedAt,
			InstanceType: rec.InstanceType, UsageClass: rec.UsageClass,
		},
	}
	c.machines[rec.ID] = m
	if live != procNone {
		m.proc = newProcess(nil, rec.PID, startTime)
		c.workers.Add(1)
		go c.watchAdopted(m, m.proc)
	}
	c.log.Info("local machine adopted", "instance", rec.ID, "recorded", rec.State,
		"state", state, "pid", rec.PID, "note", note)
	switch state {
	case domain.CloudShuttingDown:
		c.terminate(m)
	case domain.CloudStopping:
		c.halt(m, m.proc)
		_ = c.save(m)
	default:
		_ = c.save(m)
	}
	c.settled()
	return m
}

// watchAdopted follows a process this Cloud did not start: it polls until
// the leader is gone or halting is asked for, then drains the group as
// watch does.
func (c *Cloud) watchAdopted(m *machine, p *process) {
	defer c.workers.Done()
	tick := time.NewTicker(adoptedPoll)
	defer tick.Stop()
	for p.leaderRuns() {
		select {
		case <-p.halted:
			c.drain(m, p, "")
			return
		case <-c.gone:
			return
		case <-tick.C:
		}
	}
	c.drain(m, p, "unknown: the process was not started by this control plane")
}

// leaderRuns reports whether the process's leader is still the process it
// was and has not exited.
func (p *process) leaderRuns() bool {
	info, ok := readProcStat(p.pgid)
	return ok && !info.dead() && p.startTime != 0 && info.startTime == p.startTime
}

// lockDir takes an exclusive lock (flock) on Dir itself for the Cloud's
// life: two Clouds adopting each other's machines would stop and terminate
// them under each other's feet. The lock goes with the process, so a
// crashed control plane does not hold it; the directory is opened
// close-on-exec, so machines do not inherit it.
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("local cloud: open the lock of %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("local cloud: %s is in use by another local cloud", dir)
		}
		return nil, fmt.Errorf("local cloud: lock %s: %w", dir, err)
	}
	return f, nil
}
