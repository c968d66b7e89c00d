package local

import (
	"bytes"
	"errors"
	"os"
	"strconv"
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
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		state, group, found := procStat(e.Name())
		if found && group == pgid && state != 'Z' && state != 'X' {
			live++
		}
	}
	return live, true
}

// procStat reads a process's state and process group from /proc/<pid>/stat.
func procStat(pid string) (state byte, pgid int, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0, false // gone meanwhile
	}
	// "pid (comm) state ppid pgrp …"; comm may hold spaces and parentheses.
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0, 0, false
	}
	fields := bytes.Fields(b[end+1:])
	if len(fields) < 3 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	pgid, err = strconv.Atoi(string(fields[2]))
	if err != nil {
		return 0, 0, false
	}
	return fields[0][0], pgid, true
}
