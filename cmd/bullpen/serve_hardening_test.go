package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agentapi"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// generous bounds what a test waits for a connection or serve to end; the
// timeouts under test are a fraction of it.
const generous = 20 * time.Second

// liveServe is `bullpen serve` running in this process.
type liveServe struct {
	addr   string
	admin  string // --admin-listen's address, "" without it
	logs   *testlog.Buffer
	cancel context.CancelFunc // SIGTERM
	code   chan int
}

// addrWatcher keeps serve's log and reports the address it serves on.
type addrWatcher struct {
	logs *testlog.Buffer
	once sync.Once
	addr chan string
	// admin is the admin address the line names, if any; set before addr
	// receives.
	admin string
}

var (
	servingLine      = regexp.MustCompile(`msg="bullpen serving" listen=(\S+)`)
	adminServingLine = regexp.MustCompile(`msg="bullpen serving" .*\badmin_listen=(\S+)`)
)

func (w *addrWatcher) Write(p []byte) (int, error) {
	if m := servingLine.FindSubmatch(p); m != nil {
		w.once.Do(func() {
			if a := adminServingLine.FindSubmatch(p); a != nil {
				w.admin = string(a[1])
			}
			w.addr <- string(m[1])
		})
	}
	return w.logs.Write(p)
}

// hardeningSecret signs the deliveries of the serve that startServe starts.
const hardeningSecret = "hardening secret"

// serveCommand is serve's command line and environment on a new store
// and e2eConfig, its log written to stderr.
func serveCommand(t *testing.T, stderr io.Writer, extra ...string) (*env, []string) {
	t.Helper()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "runs-on.yml", e2eConfig)
	secrets := map[string]string{"BULLPEN_WEBHOOK_SECRET": hardeningSecret, "BULLPEN_ADMIN_TOKEN": "hardening admin token"}
	e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: stderr, getenv: func(k string) string { return secrets[k] }}
	args := append([]string{"serve", "--config", cfg, "--store", "sqlite://" + filepath.Join(dir, "bullpen.db"),
		"--listen", "127.0.0.1:0", "--sim-latency", "zero"}, extra...)
	return e, args
}

func startServe(t *testing.T, extra ...string) *liveServe {
	t.Helper()
	w := &addrWatcher{logs: &testlog.Buffer{}, addr: make(chan string, 1)}
	e, args := serveCommand(t, w, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	s := &liveServe{logs: w.logs, cancel: cancel, code: make(chan int, 1)}
	go func() { s.code <- run(ctx, e, args) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.code:
		case <-time.After(generous):
			t.Errorf("serve did not stop\n%s", s.logs)
		}
	})
	select {
	case s.addr = <-w.addr:
		s.admin = w.admin
	case code := <-s.code:
		s.code <- code
		t.Fatalf("serve exited %d at start\n%s", code, s.logs)
	case <-time.After(generous):
		t.Fatalf("serve did not start\n%s", s.logs)
	}
	return s
}

// stop is SIGTERM: it returns serve's exit code and how long it took.
func (s *liveServe) stop(t *testing.T) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	s.cancel()
	select {
	case code := <-s.code:
		s.code <- code // for the cleanup
		return code, time.Since(start)
	case <-time.After(generous):
		t.Fatalf("serve did not stop within %s\n%s", generous, s.logs)
		return 0, 0
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(generous)); err != nil {
		t.Fatal(err)
	}
	return c
}

// startSlowDelivery sends a delivery's headers and, once the handler reads
// its body (it answers the Expect header with 100 Continue: from then on
// the request is in progress), the first byte of the body, then nothing.
// It returns the connection to read the answer from.
func startSlowDelivery(t *testing.T, addr string) *bufio.Reader {
	t.Helper()
	c := dial(t, addr)
	_, err := io.WriteString(c, "POST /webhook HTTP/1.1\r\nHost: bullpen\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n"+
		"X-GitHub-Event: workflow_job\r\nX-GitHub-Delivery: slow\r\n"+
		"X-Hub-Signature-256: sha256="+strings.Repeat("0", 64)+"\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("want 100 Continue, got %v %v", resp, err)
	}
	if _, err := io.WriteString(c, "{"); err != nil {
		t.Fatal(err)
	}
	return br
}

// readUntilClosed reads a connection (opened by dial) until the server
// closes it, and fails the test if the server did not within the
// connection's generous deadline.
func readUntilClosed(t *testing.T, c io.Reader) string {
	t.Helper()
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %s; read %q", generous, got)
	}
	return string(got)
}

func TestServeCutsASlowBodyAfterTheReadTimeout(t *testing.T) {
	s := startServe(t, "--http-read-timeout", "300ms")
	got := readUntilClosed(t, startSlowDelivery(t, s.addr))
	if !strings.HasPrefix(got, "HTTP/1.1 400") || !strings.Contains(got, "cannot read the body") {
		t.Fatalf("answer %q, want a 400 naming the unread body", got)
	}
}

func TestServeClosesAnIdleKeepAliveConnection(t *testing.T) {
	s := startServe(t, "--http-idle-timeout", "300ms")
	c := dial(t, s.addr)
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: bullpen\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("healthz: %d (close %v, %v), want 200 on a kept connection", resp.StatusCode, resp.Close, err)
	}
	if rest := readUntilClosed(t, br); rest != "" {
		t.Fatalf("read %q from an idle connection", rest)
	}
}

// A slow sender and an idle connection hold shutdown no longer than the
// read timeout, far from the grace: serve exits 0.
func TestServeShutdownIsNotHeldByASlowClient(t *testing.T) {
	const grace = time.Minute
	s := startServe(t, "--http-read-timeout", "500ms", "--shutdown-grace", grace.String())
	slow := startSlowDelivery(t, s.addr)
	idle := dial(t, s.addr)
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: bullpen\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := http.ReadResponse(bufio.NewReader(idle), nil); err != nil {
		t.Fatal(err)
	}
	code, took := s.stop(t)
	if code != 0 || took >= grace/2 {
		t.Fatalf("exit %d after %s, want 0 well within the %s grace\n%s", code, took, grace, s.logs)
	}
	readUntilClosed(t, slow)
	readUntilClosed(t, idle)
	if lines := s.logs.Lines("level=ERROR"); len(lines) > 0 {
		t.Errorf("errors logged: %s", lines)
	}
}

// Requests still open when the grace is up are cut, and serve says so at
// ERROR and exits 1, as the README promises.
func TestServeExitsOneWhenRequestsOutlastTheGrace(t *testing.T) {
	s := startServe(t, "--http-read-timeout", "1m", "--shutdown-grace", "300ms")
	slow := startSlowDelivery(t, s.addr)
	code, _ := s.stop(t)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, s.logs)
	}
	if len(s.logs.Lines("level=ERROR", "shutdown grace")) != 1 {
		t.Fatalf("no ERROR line about the grace:\n%s", s.logs)
	}
	readUntilClosed(t, slow)
}

// The agents' long poll is held past the read and write timeouts, which
// still cut every other route.
func TestLongPollOutlivesTheHTTPTimeouts(t *testing.T) {
	settings := httpSettings{read: 100 * time.Millisecond, write: 100 * time.Millisecond, idle: time.Minute}
	hold := 5 * settings.read // what a long poll holds its request, here
	held := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(hold):
			io.WriteString(w, "held")
		case <-r.Context().Done():
			io.WriteString(w, "cancelled")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(http.HandlerFunc(held), settings)
	go srv.Serve(ln)
	defer srv.Close()
	client := &http.Client{Timeout: generous}
	for path, wantHeld := range map[string]bool{agentapi.PathNext + "?wait=30s": true, "/api/v1/jobs": false} {
		resp, err := client.Get("http://" + ln.Addr().String() + path)
		if !wantHeld {
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Errorf("GET %s: %d %q past the timeouts, want the connection cut", path, resp.StatusCode, b)
			}
			continue
		}
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "held" {
			t.Errorf("GET %s: %d %q, want 200 held", path, resp.StatusCode, b)
		}
	}
}

func TestServeRefusesNonPositiveHTTPTimeouts(t *testing.T) {
	for _, flag := range []string{"--http-read-timeout", "--http-write-timeout", "--http-idle-timeout"} {
		code, _, errs := runCmd(t, "serve", flag, "0s")
		if code != 78 || !strings.Contains(errs, flag+" 0s: want a positive duration") {
			t.Errorf("%s 0s: exit %d, %s", flag, code, errs)
		}
	}
}
