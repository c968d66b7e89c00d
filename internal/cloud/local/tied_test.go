package local

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// runServeTemporary plays a control plane on a temporary directory that is
// about to crash: it launches one machine that holds the write end of the
// test's pipe (file descriptor 3), closes its own, prints "machine", the
// machine's pid and start time, and runs until it is killed.
func runServeTemporary() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	watch := os.NewFile(3, "watch")
	c, err := New(Options{Log: slog.New(slog.DiscardHandler), Command: func(m Machine) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "helper", "sleep", m.StateDir)
		cmd.ExtraFiles = []*os.File{watch}
		return cmd
	}})
	if err != nil {
		fail(err)
	}
	ms, err := c.Create(context.Background(), domain.LaunchSpec{ImageID: "local-test", Count: 1})
	if err != nil {
		fail(err)
	}
	_ = watch.Close()
	pid, _ := c.PID(ms[0].ID)
	info, _ := readProcStat(pid)
	fmt.Println("machine", pid, info.startTime)
	for {
		time.Sleep(time.Hour)
	}
}

// The machines of a temporary directory end with their control plane even
// when it crashes, and so never run on with nobody to stop them. (With a
// Dir of the caller's they outlive it: TestASecondCloudAdoptsTheMachinesOfOneThatCrashed.)
func TestTheMachinesOfATemporaryDirectoryEndWithACrashedControlPlane(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux signals a process whose parent ended")
	}
	watchR, watchW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer watchR.Close()
	cmd := exec.Command(os.Args[0], "serve-temporary")
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir()) // the crash leaves the directory behind
	cmd.ExtraFiles = []*os.File{watchW}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the control plane: %v", err)
	}
	_ = watchW.Close() // the machine's process holds the last write end
	line, err := bufio.NewReader(out).ReadString('\n')
	_ = cmd.Process.Kill() // SIGKILL: nothing of the Cloud runs after this
	_ = cmd.Wait()
	fields := strings.Fields(line)
	if err != nil || len(fields) != 3 || fields[0] != "machine" {
		t.Fatalf("control plane said %q, %v; want its machine", line, err)
	}
	pid, _ := strconv.Atoi(fields[1])
	start, _ := strconv.ParseUint(fields[2], 10, 64)
	t.Cleanup(func() { killIfStill(pid, start) })

	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, watchR) // ends when the machine's process has exited
		close(gone)
	}()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatalf("the machine's process (pid %d) outlived its crashed control plane", pid)
	}
}
