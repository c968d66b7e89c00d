package local

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/cloudtest"
	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestContract(t *testing.T) {
	cloudtest.Run(t, func(t *testing.T) domain.Cloud {
		return newCloud(t, Options{Command: func(Machine) *exec.Cmd {
			return exec.Command("sleep", "3600")
		}})
	})
}

func TestStopReapsTheProcessAndStartRunsANewOne(t *testing.T) {
	h := newHelpers(t, "sleep")
	c := newCloud(t, Options{Command: h.command})
	id, first := h.running(c)
	m, _ := c.Machine(id)

	stopped(t, c, id, "stopped machine's process", first)
	if _, ok := c.PID(id); ok {
		t.Errorf("stopped machine still has a process")
	}
	if _, err := os.Stat(m.EnvFile); err != nil {
		t.Errorf("stopped machine lost its env file: %v", err)
	}

	if err := c.Start(t.Context(), []string{id}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got := stateOf(t, c, id); got != domain.CloudRunning {
		t.Fatalf("after Start %s is %s", id, got)
	}
	h.ready(id)
	second := pidOf(t, c, id)
	if second == first {
		t.Errorf("Start reused pid %d", first)
	}

	if err := c.Terminate(t.Context(), []string{id}); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	waitState(t, c, id, domain.CloudTerminated)
	wantGone(t, "terminated machine's process", second)
	if _, err := os.Stat(m.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("terminated machine's directory: %v, want it removed", err)
	}
	want := map[string]int{ec2like.OpCreateFleet: 1, ec2like.OpStopInstances: 1, ec2like.OpStartInstances: 1,
		ec2like.OpTerminateInstances: 1, ec2like.OpDescribeInstances: 1}
	for op, n := range want {
		if got := c.Calls()[op]; got != n {
			t.Errorf("Calls[%s] = %d, want %d", op, got, n)
		}
	}
}

func TestStopKillsAProcessThatIgnoresSIGTERMAfterTheGrace(t *testing.T) {
	h := newHelpers(t, "ignore-term")
	c := newCloud(t, Options{Command: h.command, StopGrace: 100 * time.Millisecond})
	id, pid := h.running(c)
	m, _ := c.Machine(id)

	stopped(t, c, id, "process ignoring SIGTERM", pid)
	if _, err := os.Stat(filepath.Join(m.StateDir, "got-term")); err != nil {
		t.Errorf("the process was not sent SIGTERM first: %v", err)
	}
}

func TestMachineIsStoppingUntilItsProcessesAreGone(t *testing.T) {
	h := newHelpers(t, "ignore-term")
	c := newCloud(t, Options{Command: h.command, StopGrace: time.Hour})
	id, pid := h.running(c)

	if err := c.Stop(t.Context(), []string{id}); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got := stateOf(t, c, id); got != domain.CloudStopping {
		t.Fatalf("%s is %s right after Stop, want stopping", id, got)
	}
	wantRefused(t, c.Start(t.Context(), []string{id}), ec2like.CodeIncorrectState, id)
	if err := c.Stop(t.Context(), []string{id}); err != nil {
		t.Errorf("Stop of a stopping machine: %v", err)
	}
	// The grace is an hour: end the process here instead of waiting.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill: %v", err)
	}
	waitState(t, c, id, domain.CloudStopped)
}

func TestTerminateKillsTheWholeProcessGroup(t *testing.T) {
	h := newHelpers(t, "child")
	c := newCloud(t, Options{Command: h.command, StopGrace: 100 * time.Millisecond})
	id := create(t, c, 1, nil)[0]
	child, err := strconv.Atoi(h.ready(id))
	if err != nil {
		t.Fatalf("child pid: %v", err)
	}
	leader := pidOf(t, c, id)
	if info, ok := readProcStat(child); ok && info.pgid != leader {
		t.Fatalf("child is in group %d, want the machine's group %d", info.pgid, leader)
	}

	if err := c.Terminate(t.Context(), []string{id}); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	waitState(t, c, id, domain.CloudTerminated)
	wantGone(t, "machine's process", leader)
	wantGone(t, "child ignoring SIGTERM", child)
	if got, err := c.List(t.Context(), domain.CloudFilter{}); err != nil || len(got) != 0 {
		t.Errorf("listing without ids: %v, %v; want no machines", got, err)
	}
}

func TestProcessExitingOnItsOwnStopsTheMachine(t *testing.T) {
	clk := clock.NewVirtual(time.Date(2026, 3, 29, 9, 0, 0, 0, time.UTC))
	h := newHelpers(t, "exit")
	c := newCloud(t, Options{Command: h.command, Clock: clk})
	id := create(t, c, 1, nil)[0]
	waitState(t, c, id, domain.CloudStopped)
	m, _ := c.Machine(id)
	if log, err := os.ReadFile(m.LogFile); err != nil || !strings.Contains(string(log), "bye") {
		t.Errorf("agent.log = %q, %v; want the process's stderr", log, err)
	}

	clk.Advance(time.Minute)
	if err := c.Start(t.Context(), []string{id}); err != nil {
		t.Fatalf("Start of a machine that halted: %v", err)
	}
	got, err := c.List(t.Context(), domain.CloudFilter{IDs: []string{id}})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if want := clk.Now(); !got[0].LaunchedAt.Equal(want) {
		t.Errorf("LaunchedAt after Start = %v, want %v", got[0].LaunchedAt, want)
	}
	waitState(t, c, id, domain.CloudStopped)
	if log, _ := os.ReadFile(m.LogFile); strings.Count(string(log), "bye") != 2 {
		t.Errorf("agent.log = %q, want the output of both runs", log)
	}
}

func TestCloseLeavesNoProcess(t *testing.T) {
	before := children(t)
	h := newHelpers(t, "child")
	dir := t.TempDir()
	c, err := New(Options{Command: h.command, Dir: dir, StopGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ids := create(t, c, 3, nil)
	var pids []int
	for _, id := range ids {
		child, err := strconv.Atoi(h.ready(id))
		if err != nil {
			t.Fatalf("child pid: %v", err)
		}
		pids = append(pids, pidOf(t, c, id), child)
	}
	if err := c.Stop(t.Context(), ids[:1]); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitState(t, c, ids[0], domain.CloudStopped)
	if got := children(t); got != before+2 {
		t.Errorf("%d children with 2 machines running, want %d", got, before+2)
	}

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := children(t); got != before {
		t.Errorf("%d children after Close, want %d", got, before)
	}
	for _, pid := range pids {
		wantGone(t, "machine process after Close", pid)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("work directory after Close holds %v (%v), want nothing", entries, err)
	}
	_, err = c.Create(t.Context(), domain.LaunchSpec{ImageID: "local-test", Count: 1})
	if !errors.Is(err, ErrClosed) {
		t.Errorf("Create after Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestTerminatedMachinesAreListedByIDForTheRetention(t *testing.T) {
	clk := clock.NewVirtual(time.Date(2026, 3, 29, 9, 0, 0, 0, time.UTC))
	h := newHelpers(t, "sleep")
	c := newCloud(t, Options{Command: h.command, Clock: clk, TerminatedRetention: time.Hour})
	id := create(t, c, 1, nil)[0]
	if err := c.Terminate(t.Context(), []string{id}); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	waitState(t, c, id, domain.CloudTerminated)
	clk.Advance(time.Hour - time.Second)
	if got := stateOf(t, c, id); got != domain.CloudTerminated {
		t.Fatalf("%s is %s, want terminated", id, got)
	}
	clk.Advance(time.Second)
	_, err := c.List(t.Context(), domain.CloudFilter{IDs: []string{id}})
	cloudtest.WantCode(t, err, domain.ErrUnknownInstance, ec2like.CodeNotFound)
}

func TestStateChangeRulesFollowEC2(t *testing.T) {
	c := newCloud(t, Options{Command: newHelpers(t, "sleep").command})
	id := create(t, c, 1, nil)[0]
	if err := c.Start(t.Context(), []string{id}); err != nil {
		t.Errorf("Start of a running machine: %v", err)
	}
	if err := c.Terminate(t.Context(), []string{id}); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	waitState(t, c, id, domain.CloudTerminated)
	wantGoneIDs(t, c.Stop(t.Context(), []string{id}), id)
	wantGoneIDs(t, c.Start(t.Context(), []string{id}), id)
	cloudtest.WantCode(t, c.Stop(t.Context(), nil), domain.ErrInvalidRequest, ec2like.CodeMissingParameter)
	cloudtest.WantCode(t, c.Tag(t.Context(), []string{id}, nil), domain.ErrInvalidRequest, ec2like.CodeMissingParameter)
}

func TestAgentKilledBehindTheProvidersBackLeavesTheMachineStopped(t *testing.T) {
	h := newHelpers(t, "sleep")
	c := newCloud(t, Options{Command: h.command})
	id := create(t, c, 1, nil)[0]
	h.ready(id)
	if err := syscall.Kill(pidOf(t, c, id), syscall.SIGKILL); err != nil {
		t.Fatalf("kill: %v", err)
	}
	waitState(t, c, id, domain.CloudStopped)
	if err := c.Terminate(t.Context(), []string{id}); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	waitState(t, c, id, domain.CloudTerminated)
}

func TestCloseWithKeepOnCloseLeavesTheMachinesToTheNextCloud(t *testing.T) {
	h := newHelpers(t, "sleep")
	dir := t.TempDir()
	first, err := New(Options{Command: h.command, Dir: dir, KeepOnClose: true, StopGrace: 100 * time.Millisecond,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ids := create(t, first, 2, nil)
	var pids []int
	for _, id := range ids {
		h.ready(id)
		pids = append(pids, pidOf(t, first, id))
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			signalGroup(pid, syscall.SIGKILL) // only if the test failed before terminating them
		}
	})
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, pid := range pids {
		if gone(pid) {
			t.Fatalf("machine process %d ended at Close", pid)
		}
	}
	if err := first.Stop(t.Context(), ids[:1]); !errors.Is(err, ErrClosed) {
		t.Errorf("Stop after Close: %v, want ErrClosed", err)
	}
	if _, err := first.List(t.Context(), domain.CloudFilter{}); !errors.Is(err, ErrClosed) {
		t.Errorf("List after Close: %v, want ErrClosed", err)
	}

	// The lock is free: the next Cloud on the directory adopts them
	// running, and (without KeepOnClose) ends them at its Close.
	next := newCloud(t, Options{Command: h.command, Dir: dir, StopGrace: 100 * time.Millisecond})
	for k, id := range ids {
		if got := stateOf(t, next, id); got != domain.CloudRunning {
			t.Errorf("%s is %s after a Close that kept it, want running", id, got)
		}
		if got := pidOf(t, next, id); got != pids[k] {
			t.Errorf("%s has pid %d, want %d", id, got, pids[k])
		}
	}
	if err := next.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, pid := range pids {
		wantGone(t, "machine process after the next Cloud's Close", pid)
	}
}

func TestKeepOnCloseDoesNotKeepTheMachinesOfATemporaryDirectory(t *testing.T) {
	h := newHelpers(t, "sleep")
	c, err := New(Options{Command: h.command, KeepOnClose: true, StopGrace: 100 * time.Millisecond,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	id := create(t, c, 1, nil)[0]
	h.ready(id)
	pid := pidOf(t, c, id)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantGone(t, "machine process of a temporary directory after Close", pid)
}
