package local

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// groupKillWait is how long a process group may take to disappear after
// SIGKILL before watch gives up on it (a process stuck in the kernel).
const groupKillWait = 5 * time.Second

// signalGroup sends sig to every process of the group. A group already gone
// is not an error: halting is idempotent.
func signalGroup(pgid int, sig syscall.Signal) {
	if pgid <= 1 {
		return // never the caller's own group or every process
	}
	_ = syscall.Kill(-pgid, sig)
}

// waitGroupGone waits until no live process is left in the group, or limit
// has passed, and reports which. The processes other than the leader are
// not this process's children and cannot be waited for, so it polls, with
// a backoff: in the common case the leader was the group's last process
// and the first look finds it gone.
func waitGroupGone(pgid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	pause := time.Millisecond
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
	return true
}

// groupAlive reports whether the group still has a process that is not a
// zombie. Zombies count as gone: orphans are reaped by the init process,
// and where that does not reap (some container inits) they would otherwise
// be waited for forever.
func groupAlive(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return false
	}
	if live, ok := liveGroupMembers(pgid); ok {
		return live > 0
	}
	return err == nil || errors.Is(err, syscall.EPERM)
}

// liveGroupMembers counts the group's processes that are not zombies, from
// /proc; ok is false where there is no /proc to read.
func liveGroupMembers(pgid int) (live int, ok bool) {
	ok = eachProcess(func(_ int, info procInfo) {
		if info.pgid == pgid && !info.dead() {
			live++
		}
	})
	return live, ok
}

// eachProcess calls visit with every process /proc lists (and can still
// read); ok is false where there is no /proc to read.
func eachProcess(visit func(pid int, info procInfo)) (ok bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if info, found := readProcStat(pid); found {
			visit(pid, info)
		}
	}
	return true
}

// procInfo is what /proc/<pid>/stat tells about a process.
type procInfo struct {
	state     byte   // R, S, D, Z (zombie), X (dead), …
	pgid      int    // its process group
	startTime uint64 // when it started, in clock ticks after boot: with the pid, it names one process
}

// dead reports a process that has exited and waits to be reaped.
func (p procInfo) dead() bool { return p.state == 'Z' || p.state == 'X' }

// readProcStat reads /proc/<pid>/stat; ok is false when the process does
// not exist (or there is no /proc).
func readProcStat(pid int) (info procInfo, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	// "pid (comm) state ppid pgrp … starttime …"; comm may hold spaces and
	// parentheses, so fields are counted from its closing one: state is
	// the 3rd field of the line, pgrp the 5th, starttime the 22nd.
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return procInfo{}, false
	}
	fields := bytes.Fields(b[end+1:])
	if len(fields) < 20 || len(fields[0]) != 1 {
		return procInfo{}, false
	}
	pgid, err := strconv.Atoi(string(fields[2]))
	if err != nil {
		return procInfo{}, false
	}
	start, err := strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return procInfo{}, false
	}
	return procInfo{state: fields[0][0], pgid: pgid, startTime: start}, true
}

// haveProc reports whether this host has a /proc to tell processes apart.
var haveProc = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
})

// cmdlineHas reports whether an argument of the process's command line
// contains s.
func cmdlineHas(pid int, s string) bool {
	if s == "" {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	for _, arg := range bytes.Split(b, []byte{0}) {
		if bytes.Contains(arg, []byte(s)) {
			return true
		}
	}
	return false
}

// leaderRef is a live process that leads its own group, as unrecordedLeaders
// found it.
type leaderRef struct {
	pid       int
	startTime uint64
}

// unrecordedLeaders finds, by machine id, the live processes that lead their
// own group and started with MachineEnv set to that id. A machine's record
// is written before its process starts and again with its pid, so these are
// how a process started in between is found once the provider that started
// it is gone. Where several hold one id (a job's process may have made a
// group of its own), the oldest is the machine's. Nothing is found where
// there is no /proc.
func unrecordedLeaders() map[string]leaderRef {
	found := map[string]leaderRef{}
	self := os.Getpid()
	eachProcess(func(pid int, info procInfo) {
		if pid == self || info.dead() || info.pgid != pid {
			return
		}
		id := machineOfProcess(pid)
		if had, taken := found[id]; id != "" && (!taken || info.startTime < had.startTime) {
			found[id] = leaderRef{pid: pid, startTime: info.startTime}
		}
	})
	return found
}

// machineOfProcess is the MachineEnv the process started with, "" when it
// had none (or its environment cannot be read: another user's process).
func machineOfProcess(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if id, ok := bytes.CutPrefix(kv, []byte(MachineEnv+"=")); ok && validID(string(id)) {
			return string(id)
		}
	}
	return ""
}
