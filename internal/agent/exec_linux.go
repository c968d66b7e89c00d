package agent

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr kills a command if the agent dies before it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// proc is a process as /proc shows it; start (in clock ticks since boot)
// tells it from a later process that reuses its pid.
type proc struct {
	pid, ppid int
	start     uint64
}

// stopTree sends SIGTERM to pid and all its descendants, and SIGKILL after
// grace to those still there. The tree is read first: a shell killed
// before its children leaves them orphaned, out of reach of a later walk.
func stopTree(pid int, grace time.Duration) {
	tree := descendants(pid)
	for _, p := range tree {
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
	}
	time.AfterFunc(grace, func() {
		for _, p := range append(tree, descendantsOfAll(tree)...) {
			if cur, ok := readProc(p.pid); ok && cur.start == p.start {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	})
}

// descendants returns pid and every process below it.
func descendants(pid int) []proc {
	root, ok := readProc(pid)
	if !ok {
		return []proc{{pid: pid}}
	}
	return append([]proc{root}, descendantsOfAll([]proc{root})...)
}

// descendantsOfAll returns the processes below any of roots.
func descendantsOfAll(roots []proc) []proc {
	children := map[int][]proc{}
	for _, p := range allProcs() {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []proc
	queue := append([]proc(nil), roots...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p.pid] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func allProcs() []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// readProc parses /proc/PID/stat: "pid (comm) state ppid ... starttime ...",
// where comm may hold spaces and parentheses.
func readProc(pid int) (proc, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(s[i+1:]) // state, ppid, …; starttime is the 20th
	if len(f) < 20 {
		return proc{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return proc{}, false
	}
	return proc{pid: pid, ppid: ppid, start: start}, true
}
