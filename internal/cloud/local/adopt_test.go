package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// crashedTags tag the machines of the control plane runServe plays.
var crashedTags = map[string]string{domain.TagController: "crashed-serve"}

// runServe plays a control plane that is about to crash: it opens a Cloud
// on dir, launches three machines, stops the last one, prints "ids" and
// their ids, and runs until it is killed.
func runServe(dir string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c, err := New(Options{Dir: dir, Log: slog.New(slog.DiscardHandler), Command: func(m Machine) *exec.Cmd {
		return exec.Command(os.Args[0], "helper", "sleep", m.StateDir)
	}})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	ms, err := c.Create(ctx, domain.LaunchSpec{ImageID: "local-test", Count: 3, Tags: crashedTags})
	if err != nil {
		fail(err)
	}
	ids := machineIDs(ms)
	if err := c.Stop(ctx, ids[2:]); err != nil {
		fail(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		got, err := c.List(ctx, domain.CloudFilter{IDs: ids[2:]})
		if err == nil && got[0].State == domain.CloudStopped {
			break
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("%s did not stop: %v, %v", ids[2], got, err))
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("ids", strings.Join(ids, " "))
	for {
		time.Sleep(time.Hour)
	}
}

// crashServe runs runServe in a process of its own, kills it once its
// machines are up, and returns their ids: the running ones first, then the
// stopped one. Whatever the test leaves of them is killed when it ends.
func crashServe(t *testing.T, dir string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("pipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the control plane: %v", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	_ = cmd.Process.Kill() // SIGKILL: nothing of the Cloud runs after this
	_ = cmd.Wait()
	ids := strings.Fields(strings.TrimPrefix(line, "ids"))
	if err != nil || len(ids) != 3 {
		t.Fatalf("control plane said %q, %v; want three ids", line, err)
	}
	for _, id := range ids {
		rec, err := readRecord(filepath.Join(dir, id))
		if err == nil && rec.PID > 1 {
			pgid := rec.PID
			t.Cleanup(func() { killIfStill(pgid, rec.StartTime) })
		}
	}
	return ids
}

// killIfStill kills a process group whose leader is still the process that
// started at startTime: a safety net for a failed test, which must not
// leave processes behind nor kill anything else.
func killIfStill(pgid int, startTime uint64) {
	if info, ok := readProcStat(pgid); ok && !info.dead() && info.startTime == startTime {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// leader is a process a test starts behind the Cloud's back, in a process
// group of its own.
type leader struct {
	cmd    *exec.Cmd
	pid    int
	start  uint64
	exited chan struct{} // closed once it has exited and been reaped
	state  *os.ProcessState
	child  int // the pid of its child, in "child" mode
}

// startLeader runs the test binary as a helper in mode, with arg as its
// last argument, and waits for it to be ready. It is killed when the test
// ends, if it still runs.
func startLeader(t *testing.T, mode, arg string) *leader {
	t.Helper()
	return startLeaderWith(t, nil, "", mode, arg)
}

// startLeaderWith is startLeader with variables added to the process's
// environment, and its working directory.
func startLeaderWith(t *testing.T, env []string, wd, mode, arg string) *leader {
	t.Helper()
	cmd := exec.Command(os.Args[0], "helper", mode, arg)
	cmd.Dir = wd
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("pipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", mode, err)
	}
	l := &leader{cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{})}
	info, _ := readProcStat(l.pid)
	l.start = info.startTime
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		_ = cmd.Process.Kill()
		t.Fatalf("%s not ready: %q, %v", mode, line, err)
	}
	if rest := strings.TrimSpace(strings.TrimPrefix(line, "ready")); rest != "" {
		l.child, _ = strconv.Atoi(rest)
	}
	go func() {
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		l.state = cmd.ProcessState
		close(l.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by pidfd: never a process that reused the pid
		<-l.exited
		if info, ok := readProcStat(l.child); l.child != 0 && ok && info.pgid == l.pid && !info.dead() {
			_ = syscall.Kill(l.child, syscall.SIGKILL)
		}
	})
	return l
}

// waitExit waits for the leader to exit and be reaped.
func (l *leader) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-l.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("process %d still runs", l.pid)
	}
}

func (l *leader) running() bool {
	select {
	case <-l.exited:
		return false
	default:
		return true
	}
}

func TestASecondCloudAdoptsTheMachinesOfOneThatCrashed(t *testing.T) {
	dir := t.TempDir()
	ids := crashServe(t, dir)
	h := newHelpers(t, "sleep")
	c := newCloud(t, Options{Dir: dir, Command: h.command, StopGrace: 100 * time.Millisecond})

	got, err := c.List(t.Context(), domain.CloudFilter{Tags: crashedTags})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	wantStates := map[string]domain.CloudState{
		ids[0]: domain.CloudRunning, ids[1]: domain.CloudRunning, ids[2]: domain.CloudStopped}
	if len(got) != 3 {
		t.Fatalf("the new Cloud lists %v, want %v", got, ids)
	}
	for _, m := range got {
		if m.State != wantStates[m.ID] || !maps.Equal(m.Tags, crashedTags) ||
			m.InstanceType != InstanceType || m.LaunchedAt.IsZero() {
			t.Errorf("machine %+v, want %s tagged %v", m, wantStates[m.ID], crashedTags)
		}
	}
	first, second := pidOf(t, c, ids[0]), pidOf(t, c, ids[1])

	if err := c.Stop(t.Context(), ids[:1]); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitState(t, c, ids[0], domain.CloudStopped)
	wantGone(t, "stopped adopted machine's process", first)
	if rec, err := readRecord(filepath.Join(dir, ids[0])); err != nil || rec.State != domain.CloudStopped || rec.PID != 0 {
		t.Errorf("record after Stop = %+v, %v; want stopped without a pid", rec, err)
	}
	if err := c.Terminate(t.Context(), ids[1:2]); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	waitState(t, c, ids[1], domain.CloudTerminated)
	wantGone(t, "terminated adopted machine's process", second)
	if _, err := os.Stat(filepath.Join(dir, ids[1])); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("terminated machine's directory: %v, want it removed", err)
	}
	if err := c.Start(t.Context(), []string{ids[0], ids[2]}); err != nil {
		t.Fatalf("Start of adopted stopped machines: %v", err)
	}
	h.ready(ids[0])
	h.ready(ids[2])
	restarted := []int{pidOf(t, c, ids[0]), pidOf(t, c, ids[2])}

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, pid := range append(restarted, first, second) {
		wantGone(t, "machine process after Close", pid)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("work directory after Close holds %v (%v), want nothing", entries, err)
	}
}

func TestAMachineRecordedBehindTheCloudsBackIsListedAndTerminated(t *testing.T) {
	dir := t.TempDir()
	c := newCloud(t, Options{Dir: dir, Command: newHelpers(t, "sleep").command, StopGrace: 100 * time.Millisecond})
	if got, err := c.List(t.Context(), domain.CloudFilter{}); err != nil || len(got) != 0 {
		t.Fatalf("List = %v, %v; want nothing", got, err)
	}
	stray := startLeader(t, "sleep", "-")
	tags := map[string]string{domain.TagController: "ctl-1", domain.TagPool: "stray"}
	const id = "l-00000000beef"
	if err := writeMachine(dir, Record{ID: id, Tags: tags, PID: stray.pid}); err != nil {
		t.Fatalf("WriteMachine: %v", err)
	}

	got, err := c.List(t.Context(), domain.CloudFilter{Tags: map[string]string{domain.TagController: "ctl-1"}})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(got) != 1 || got[0].ID != id || got[0].State != domain.CloudRunning || !maps.Equal(got[0].Tags, tags) ||
		got[0].InstanceType != InstanceType || got[0].UsageClass != UsageClass || got[0].LaunchedAt.IsZero() {
		t.Fatalf("List = %+v, want %s running tagged %v", got, id, tags)
	}
	if pid := pidOf(t, c, id); pid != stray.pid {
		t.Errorf("PID = %d, want %d", pid, stray.pid)
	}
	if err := c.Terminate(t.Context(), []string{id}); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	stray.waitExit(t)
	if ws := stray.state.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGTERM {
		t.Errorf("the process ended with %v, want SIGTERM", stray.state)
	}
	waitState(t, c, id, domain.CloudTerminated)
	if _, err := os.Stat(filepath.Join(dir, id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("terminated machine's directory: %v, want it removed", err)
	}
}

func TestCallsNamingARecordedMachineAdoptIt(t *testing.T) {
	dir := t.TempDir()
	c := newCloud(t, Options{Dir: dir, Command: newHelpers(t, "sleep").command})
	const id = "l-0000000000aa"
	if err := writeMachine(dir, Record{ID: id}); err != nil {
		t.Fatalf("WriteMachine: %v", err)
	}
	if err := c.Tag(t.Context(), []string{id}, map[string]string{"k": "v"}); err != nil {
		t.Fatalf("Tag of a machine recorded behind the Cloud's back: %v", err)
	}
	got, err := c.List(t.Context(), domain.CloudFilter{IDs: []string{id}})
	if err != nil || len(got) != 1 || got[0].State != domain.CloudStopped || got[0].Tags["k"] != "v" {
		t.Fatalf("List = %+v, %v; want %s stopped, tagged", got, err, id)
	}
	if rec, err := readRecord(filepath.Join(dir, id)); err != nil || rec.Tags["k"] != "v" {
		t.Errorf("record after Tag = %+v, %v", rec, err)
	}
}

func TestAnAdoptedProcessExitingOnItsOwnStopsTheMachine(t *testing.T) {
	dir := t.TempDir()
	h := newHelpers(t, "sleep")
	c := newCloud(t, Options{Dir: dir, Command: h.command})
	stray := startLeader(t, "sleep", "-")
	const id = "l-0000000000bb"
	if err := writeMachine(dir, Record{ID: id, PID: stray.pid}); err != nil {
		t.Fatalf("WriteMachine: %v", err)
	}
	if got := stateOf(t, c, id); got != domain.CloudRunning {
		t.Fatalf("%s is %s, want running", id, got)
	}
	_ = stray.cmd.Process.Kill()
	stray.waitExit(t)
	waitState(t, c, id, domain.CloudStopped)
	if err := c.Start(t.Context(), []string{id}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	h.ready(id)
}

func TestAProcessStartedBeforeItsPidWasRecordedIsAdopted(t *testing.T) {
	dir := t.TempDir()
	// Records as launchOne writes them before the process starts: pending,
	// no pid.
	const started, notStarted, unrecorded = "l-0000000000cc", "l-0000000000dd", "l-0000000000ee"
	for _, id := range []string{started, notStarted} {
		if err := writeMachine(dir, Record{ID: id, State: domain.CloudPending}); err != nil {
			t.Fatalf("WriteMachine: %v", err)
		}
	}
	machine := startLeaderWith(t, []string{MachineEnv + "=" + started}, "", "sleep", "-")
	// An operator's shell or editor in the other machine's directory,
	// naming its env file, is not its process.
	paths := machinePaths(dir, notStarted)
	operator := startLeaderWith(t, nil, paths.Dir, "sleep", paths.EnvFile)
	stranger := startLeaderWith(t, []string{MachineEnv + "=" + unrecorded}, "", "sleep", "-")

	c := newCloud(t, Options{Dir: dir, Command: newHelpers(t, "sleep").command, StopGrace: 100 * time.Millisecond})
	if got := stateOf(t, c, started); got != domain.CloudRunning {
		t.Errorf("%s is %s, want running: its process runs", started, got)
	}
	if got := pidOf(t, c, started); got != machine.pid {
		t.Errorf("%s has pid %d, want %d", started, got, machine.pid)
	}
	if rec, err := readRecord(filepath.Join(dir, started)); err != nil || rec.PID != machine.pid {
		t.Errorf("record of %s = %+v, %v; want the pid %d written", started, rec, err, machine.pid)
	}
	if got := stateOf(t, c, notStarted); got != domain.CloudStopped {
		t.Errorf("%s is %s, want stopped: no process of its started", notStarted, got)
	}
	if err := c.Terminate(t.Context(), []string{started, notStarted}); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	machine.waitExit(t)
	if ws := machine.state.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGTERM {
		t.Errorf("the machine's process ended with %v, want SIGTERM", machine.state)
	}
	waitState(t, c, notStarted, domain.CloudTerminated)
	for _, l := range []*leader{operator, stranger} {
		if !l.running() {
			t.Errorf("process %d, not a recorded machine's, was signalled", l.pid)
		}
	}
}
