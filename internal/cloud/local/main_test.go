package local

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// The test binary doubles as the machines' processes: run with "helper
// MODE DIR" or, as the default Command runs it, "agent --config FILE", it
// plays a process instead of running the tests.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "helper":
			runHelper(os.Args[2], os.Args[3])
			return
		case "serve":
			runServe(os.Args[2])
			return
		case "serve-temporary":
			runServeTemporary()
			return
		case "agent":
			runFakeAgent(os.Args[1:])
			// Not 0: a race-enabled binary pauses a second on a
			// clean exit.
			os.Exit(7)
		}
	}
	os.Exit(m.Run())
}

// runHelper plays one kind of machine process. Every mode that keeps running
// writes "ready" (and a pid, for child) to stdout once it is set up.
func runHelper(mode, dir string) {
	switch mode {
	case "sleep": // dies on SIGTERM
		fmt.Println("ready")
	case "ignore-term": // notes SIGTERM in DIR/got-term and keeps running
		terms := make(chan os.Signal, 1)
		signal.Notify(terms, syscall.SIGTERM)
		go func() {
			<-terms
			_ = os.WriteFile(filepath.Join(dir, "got-term"), nil, 0o600)
		}()
		fmt.Println("ready")
	case "child": // dies on SIGTERM, leaving a child that ignores it
		pid, err := startIgnoringChild(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println("ready", pid)
	case "exit": // halts at once, as an agent shutting its machine down
		fmt.Fprintln(os.Stderr, "bye")
		os.Exit(3)
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		os.Exit(2)
	}
	for {
		time.Sleep(time.Hour)
	}
}

func startIgnoringChild(dir string) (int, error) {
	child := exec.Command(os.Args[0], "helper", "ignore-term", dir)
	out, err := child.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := child.Start(); err != nil {
		return 0, err
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		return 0, fmt.Errorf("child not ready: %q, %v", line, err)
	}
	return child.Process.Pid, nil
}

// runFakeAgent reports how the default Command ran it, then exits.
func runFakeAgent(args []string) {
	wd, _ := os.Getwd()
	fmt.Printf("args=%s\n", strings.Join(args, " "))
	fmt.Printf("wd=%s\n", wd)
	for _, kv := range os.Environ() {
		fmt.Printf("env %s\n", kv)
	}
}

// newCloud returns a Cloud in a test directory, closed when the test ends.
func newCloud(t *testing.T, opts Options) *Cloud {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	c, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// helpers runs the test binary as machines in one helper mode, each
// process's stdout on a pipe, so that a test can wait for it to be ready.
type helpers struct {
	t     *testing.T
	mode  string
	mu    sync.Mutex
	lines map[string]chan string // by machine id, from its latest process
	pipes []io.Closer
}

func newHelpers(t *testing.T, mode string) *helpers {
	h := &helpers{t: t, mode: mode, lines: map[string]chan string{}}
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, p := range h.pipes {
			_ = p.Close()
		}
	})
	return h
}

func (h *helpers) command(m Machine) *exec.Cmd {
	r, w, err := os.Pipe()
	if err != nil {
		h.t.Errorf("pipe: %v", err)
		return nil
	}
	lines := make(chan string, 8)
	go func() {
		defer close(lines)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	h.mu.Lock()
	h.lines[m.ID] = lines
	h.pipes = append(h.pipes, w)
	h.mu.Unlock()
	cmd := exec.Command(os.Args[0], "helper", h.mode, m.StateDir)
	cmd.Stdout = w
	return cmd
}

// ready waits for the machine's latest process to report ready and returns
// what followed the word.
func (h *helpers) ready(id string) string {
	h.t.Helper()
	h.mu.Lock()
	lines := h.lines[id]
	h.mu.Unlock()
	select {
	case line, ok := <-lines:
		if !ok || !strings.HasPrefix(line, "ready") {
			h.t.Fatalf("%s: not ready: %q", id, line)
		}
		return strings.TrimSpace(strings.TrimPrefix(line, "ready"))
	case <-time.After(10 * time.Second):
		h.t.Fatalf("%s: no ready line", id)
	}
	return ""
}

// running creates one machine on c and waits until its process is ready;
// it returns the machine's id and its process's.
func (h *helpers) running(c *Cloud) (string, int) {
	h.t.Helper()
	id := create(h.t, c, 1, nil)[0]
	h.ready(id)
	return id, pidOf(h.t, c, id)
}

// stopped stops machine id and waits until it is stopped and its process
// pid gone (what names the process in a failure).
func stopped(t *testing.T, c *Cloud, id, what string, pid int) {
	t.Helper()
	if err := c.Stop(t.Context(), []string{id}); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitState(t, c, id, domain.CloudStopped)
	wantGone(t, what, pid)
}

// create launches n machines tagged with tags and returns their ids.
func create(t *testing.T, c *Cloud, n int, tags map[string]string) []string {
	t.Helper()
	ms, err := c.Create(t.Context(), domain.LaunchSpec{ImageID: "local-test", Count: n, Tags: tags})
	if err != nil {
		t.Fatalf("Create %d: %v", n, err)
	}
	return machineIDs(ms)
}

func machineIDs(ms []domain.CloudInstance) []string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

// waitState waits until the machine is in state, woken by every change.
func waitState(t *testing.T, c *Cloud, id string, want domain.CloudState) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		m, ok := c.machines[id]
		var state domain.CloudState
		if ok {
			state = m.inst.State
		}
		changed := c.changed
		c.mu.Unlock()
		switch {
		case !ok:
			t.Fatalf("%s is unknown", id)
		case state == want:
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%s is %s, want %s", id, state, want)
		}
	}
}

func stateOf(t *testing.T, c *Cloud, id string) domain.CloudState {
	t.Helper()
	got, err := c.List(t.Context(), domain.CloudFilter{IDs: []string{id}})
	if err != nil || len(got) != 1 {
		t.Fatalf("List %s: %v, %v", id, got, err)
	}
	return got[0].State
}

func pidOf(t *testing.T, c *Cloud, id string) int {
	t.Helper()
	pid, ok := c.PID(id)
	if !ok {
		t.Fatalf("%s has no process", id)
	}
	return pid
}

// gone reports whether the process no longer runs: it does not exist, or
// it is a zombie left to an init that does not reap.
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	info, ok := readProcStat(pid)
	return ok && info.dead()
}

func wantGone(t *testing.T, what string, pid int) {
	t.Helper()
	if !gone(pid) {
		t.Errorf("%s (pid %d) still runs", what, pid)
	}
}

// children counts this process's child processes, zombies included.
func children(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	me := strconv.Itoa(os.Getpid())
	n := 0
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		end := strings.LastIndexByte(string(b), ')')
		if fields := strings.Fields(string(b[end+1:])); len(fields) > 1 && fields[1] == me {
			n++
		}
	}
	return n
}

// wantRefused fails unless err names exactly ids as refused with code (the
// call acted on every other machine), and reads as neither an invalid
// request nor an unknown machine.
func wantRefused(t *testing.T, err error, code string, ids ...string) {
	t.Helper()
	r, ok := errors.AsType[*domain.RefusedInstancesError](err)
	if !ok || !slices.Equal(r.IDs, ids) || r.Code != code || errors.Is(err, domain.ErrInvalidRequest) || errors.Is(err, domain.ErrUnknownInstance) {
		t.Fatalf("error %v, want %s refusing %v", err, code, ids)
	}
}

// wantGoneIDs fails unless err names exactly ids as unknown: terminated
// machines, as EC2's provider reports them.
func wantGoneIDs(t *testing.T, err error, ids ...string) {
	t.Helper()
	if got := domain.UnknownIDs(err); !slices.Equal(got, ids) {
		t.Fatalf("error %v names %v unknown, want %v", err, got, ids)
	}
}
