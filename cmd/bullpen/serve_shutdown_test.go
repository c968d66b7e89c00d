package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// fakeServable stands for the app: its loops and handler are the test's.
type fakeServable struct {
	handler  http.Handler
	admin    http.Handler // the admin address's, when split
	run      func(ctx context.Context) error
	drained  chan struct{}
	drainOne sync.Once
	draining atomic.Bool
}

func (f *fakeServable) Run(ctx context.Context) error { return f.run(ctx) }
func (f *fakeServable) Drain()                        { f.drainOne.Do(func() { close(f.drained) }) }
func (f *fakeServable) Draining()                     { f.draining.Store(true) }

func (f *fakeServable) Handlers(split bool) (http.Handler, http.Handler) {
	if split {
		return f.handler, f.admin
	}
	return f.handler, nil
}

// runServe runs serveUntilDone on a local port; cancel is the signal, and
// the exit code arrives on the returned channel.
func runServe(t *testing.T, a *fakeServable) (addr string, cancel context.CancelFunc, code <-chan int, logs *testlog.Buffer) {
	t.Helper()
	lns := listeners{public: localListener(t)}
	cancel, code, logs = runServeOn(t, a, lns)
	return "http://" + lns.public.Addr().String(), cancel, code, logs
}

// runSplitServe is runServe with an admin address besides, serving
// a.admin.
func runSplitServe(t *testing.T, a *fakeServable) (public, admin string, cancel context.CancelFunc, code <-chan int, logs *testlog.Buffer) {
	t.Helper()
	lns := listeners{public: localListener(t), admin: localListener(t)}
	cancel, code, logs = runServeOn(t, a, lns)
	return "http://" + lns.public.Addr().String(), "http://" + lns.admin.Addr().String(), cancel, code, logs
}

func localListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func runServeOn(t *testing.T, a *fakeServable, lns listeners) (cancel context.CancelFunc, code <-chan int, logs *testlog.Buffer) {
	t.Helper()
	logs = &testlog.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- serveUntilDone(ctx, a, lns, slog.New(slog.NewTextHandler(logs, nil)), httpSettings{read: generous, write: generous, idle: generous, grace: generous})
	}()
	t.Cleanup(cancel)
	return cancel, done, logs
}

// A machine booting for a job says hello while the loops finish the work
// in hand: serve must still answer it, or the provisioner waits for a
// hello that cannot come and gives the machine up. Serve has said it is
// draining before it stops the loops, so a load balancer's health check
// turns others' way from the start.
func TestServeAnswersAgentsWhileTheLoopsFinish(t *testing.T) {
	stopping, hello := make(chan struct{}), make(chan struct{})
	a := &fakeServable{drained: make(chan struct{})}
	a.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { close(hello) })
	a.run = func(ctx context.Context) error {
		<-ctx.Done()
		if !a.draining.Load() {
			close(stopping)
			return errors.New("the loops were stopped before serve said it was draining")
		}
		close(stopping)
		select {
		case <-hello:
			return nil
		case <-a.drained:
			return errors.New("HTTP drained before the loops stopped")
		}
	}
	addr, cancel, code, logs := runServe(t, a)
	cancel()
	<-stopping
	resp, err := http.Get(addr + "/agent/v1/hello")
	if err != nil {
		t.Fatalf("an agent could not reach serve while its loops finished: %v\n%s", err, logs)
	}
	resp.Body.Close()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d, want 0\n%s", c, logs)
	}
}

// Once the loops are done, the requests held open are answered at once
// and serve exits 0.
func TestServeDrainsHeldRequestsAfterTheLoops(t *testing.T) {
	held := make(chan struct{})
	a := &fakeServable{drained: make(chan struct{})}
	a.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(held)
		<-a.drained
		io.WriteString(w, "drained")
	})
	a.run = func(ctx context.Context) error { <-ctx.Done(); return nil }
	addr, cancel, code, logs := runServe(t, a)
	body := make(chan string, 1)
	go func() {
		resp, err := http.Get(addr + "/agent/v1/next")
		if err != nil {
			body <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body <- string(b)
	}()
	<-held
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d, want 0\n%s", c, logs)
	}
	if b := <-body; b != "drained" {
		t.Fatalf("the held request got %q, want it answered by the drain", b)
	}
}

// With an admin address, both addresses are served while the loops
// finish, and both are drained after them: a request held open on the
// admin address (a dashboard's event stream) is answered by the drain,
// and serve exits 0.
func TestServeDrainsBothAddressesAfterTheLoops(t *testing.T) {
	stopping, held := make(chan struct{}), make(chan struct{})
	a := &fakeServable{drained: make(chan struct{})}
	a.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "public") })
	a.admin = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/events" {
			close(held)
			<-a.drained
			io.WriteString(w, "drained")
			return
		}
		io.WriteString(w, "admin")
	})
	answered := make(chan error, 1)
	a.run = func(ctx context.Context) error {
		<-ctx.Done()
		close(stopping)
		select {
		case err := <-answered:
			return err
		case <-a.drained:
			return errors.New("HTTP drained before the loops stopped")
		}
	}
	public, admin, cancel, code, logs := runSplitServe(t, a)
	events := make(chan string, 1)
	go func() { events <- getBody(admin + "/events") }()
	<-held
	cancel()
	<-stopping
	got := map[string]string{"public": getBody(public + "/agent/v1/hello"), "admin": getBody(admin + "/metrics")}
	if got["public"] != "public" || got["admin"] != "admin" {
		answered <- fmt.Errorf("while the loops finished: %v", got)
	} else {
		answered <- nil
	}
	if c := <-code; c != 0 {
		t.Fatalf("exit %d, want 0\n%s", c, logs)
	}
	if b := <-events; b != "drained" {
		t.Fatalf("the held admin request got %q, want it answered by the drain", b)
	}
	if lines := logs.Lines(`msg="bullpen serving"`, "admin_listen="+strings.TrimPrefix(admin, "http://")); len(lines) != 1 {
		t.Fatalf("the admin address is not logged at start:\n%s", logs)
	}
}

// getBody is a GET's body, or its error.
func getBody(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A loop that could not carry out its work (a panic, a last flush that
// failed) makes serve say so and exit 1, so that a supervisor sees it.
func TestServeExitsOneWhenALoopFailed(t *testing.T) {
	a := &fakeServable{drained: make(chan struct{}), handler: http.NotFoundHandler()}
	a.run = func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("loop heartbeats: last flush failed")
	}
	_, cancel, code, logs := runServe(t, a)
	cancel()
	if c := <-code; c != 1 {
		t.Fatalf("exit %d, want 1\n%s", c, logs)
	}
	if len(logs.Lines("level=ERROR", "last flush failed")) != 1 {
		t.Fatalf("the loop's error is not logged at ERROR:\n%s", logs)
	}
}

// signalHelper set in its environment makes the test binary, run again,
// the process TestASecondSignalEndsTheProcessAtOnce signals.
const signalHelper = "SIGNAL_HELPER_PROCESS"

// TestSignalHelperProcess stands for a command whose shutdown never ends:
// it waits for its first signal, says so, and then for its standard input
// to close, which the test never does.
func TestSignalHelperProcess(t *testing.T) {
	if os.Getenv(signalHelper) != "1" {
		t.Skip("run by TestASecondSignalEndsTheProcessAtOnce")
	}
	ctx, stop := untilSignalled(context.Background())
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("shutting down:", context.Cause(ctx))
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// A first Ctrl-C or SIGTERM starts the shutdown; a second one ends the
// process at once, however long the shutdown would still take, rather
// than being swallowed until it ends.
func TestASecondSignalEndsTheProcessAtOnce(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestSignalHelperProcess$")
	cmd.Env = append(os.Environ(), signalHelper+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Should the helper never say what the test awaits, it is killed,
	// which ends the wait.
	watchdog := time.AfterFunc(generous, func() { _ = cmd.Process.Kill() })
	defer watchdog.Stop()
	lines := bufio.NewScanner(stdout)
	await := func(prefix string) {
		t.Helper()
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), prefix) {
				return
			}
		}
		_ = cmd.Process.Kill()
		t.Fatalf("the helper ended, or was killed, before saying %q", prefix)
	}
	await("ready")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	await("shutting down:")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("the helper ended with %v, want killed by SIGTERM", err)
		}
		if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
			t.Fatalf("the helper ended with %v, want killed by SIGTERM", err)
		}
	case <-time.After(generous):
		_ = cmd.Process.Kill()
		t.Fatal("a second signal during the shutdown did not end the process")
	}
}
