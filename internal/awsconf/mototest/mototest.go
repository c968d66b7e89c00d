// Package mototest runs moto_server, the AWS emulator, for a test package:
// started on a free loopback port on first use and stopped when the
// package's tests end. Where moto_server is missing, tests that need it
// skip with the reason, or fail under CI=true.
package mototest

import (
	"context"
	_ "embed"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
)

// Region is the region the emulator is used in.
const Region = "us-east-1"

var server struct {
	once     sync.Once
	endpoint string
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd has ended
	err      error
	// patched: the emulator runs with serve.py's patches, so a test can
	// set its SQS time.
	patched bool
}

// Main runs a test package's tests and stops the emulator after them. Call
// it from TestMain: os.Exit(mototest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if server.cmd != nil {
		_ = syscall.Kill(-server.cmd.Process.Pid, syscall.SIGTERM)
		<-server.exited
	}
	return code
}

// Endpoint returns the emulator's URL, starting it on first use. Each
// caller should work under names of its own: the emulator is shared by
// the package's tests.
func Endpoint(t testing.TB) string {
	t.Helper()
	server.once.Do(start)
	if server.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("moto_server: %v; scripts/test installs it", server.err)
		}
		t.Skipf("skipped: moto_server: %v (scripts/test installs it)", server.err)
	}
	return server.endpoint
}

// Config is an AWS configuration for the emulator, with fixed dummy
// credentials.
func Config(t testing.TB) aws.Config {
	t.Helper()
	return aws.Config{
		Region:       Region,
		BaseEndpoint: aws.String(Endpoint(t)),
		Credentials:  credentials.NewStaticCredentialsProvider("testing", "testing", ""),
		HTTPClient:   awsconf.HTTPClient(awshttp.NewBuildableClient()),
	}
}

// serialised starts moto's server with its DynamoDB and SQS requests each
// handled one at a time. moto evaluates a write's condition and applies
// the write without a lock, so two concurrent conditional writes can both
// pass, which DynamoDB never allows; and two concurrent receives can take
// one message twice or leave a FIFO message group locked for good, which
// SQS never does. The contracts race writers and consumers, and would fail
// on the emulator's races rather than the adapters'. A long poll lets go
// of SQS's lock while it waits, as SQS serves other calls meanwhile; EC2
// keeps moto's threads. Three costs of moto's server that grow with load
// and mean nothing to the tests go too: the listing of its own package
// directory to route each request, a log line per request, and the copy
// of a whole table behind each transaction. And a transaction sent again
// with its client request token is answered as done, as DynamoDB answers
// it, instead of being refused by its own first write.
//
// SQS's time can be set per queue-name prefix (see SQSTime), so that a
// contract on a virtual clock runs on the emulator, and a long poll
// notices at once when it moves. Three gaps between moto and SQS close
// with it: a visibility timeout runs out at its end, not a millisecond
// later; a FIFO queue keeps a deduplication id for five minutes, even once
// its message is deleted; and ChangeMessageVisibility refuses a receipt
// from an earlier receive and a message no longer in flight.
//
//go:embed serve.py
var serialised string

// command is how the emulator is started: through Python with serve.py's
// patches where moto's package can be imported (patched), else
// moto_server as installed.
func command(port int) (cmd *exec.Cmd, patched bool, err error) {
	args := []string{"-H", "127.0.0.1", "-p", fmt.Sprint(port)}
	if py, err := exec.LookPath("python3"); err == nil && exec.Command(py, "-c", "import moto.server, moto.dynamodb.responses, moto.sqs.models").Run() == nil {
		return exec.Command(py, append([]string{"-c", serialised}, args...)...), true, nil
	}
	path, err := exec.LookPath("moto_server")
	if err != nil {
		return nil, false, fmt.Errorf("not installed: %w", err)
	}
	return exec.Command(path, args...), false, nil
}

func start() {
	port, err := freePort()
	if err != nil {
		server.err = err
		return
	}
	cmd, patched, err := command(port)
	if err != nil {
		server.err = err
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// What it says before it is up explains a start that fails (serve.py
	// refuses a moto it was not written for); nothing after matters.
	stderr := &startLog{limit: 4096}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		server.err = fmt.Errorf("start: %w", err)
		return
	}
	server.cmd, server.patched = cmd, patched
	server.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(server.exited)
	}()
	server.endpoint = fmt.Sprintf("http://127.0.0.1:%d", port)
	server.err = waitReady(server.endpoint, 60*time.Second, server.exited, stderr)
}

// startLog keeps the first limit bytes written to it.
type startLog struct {
	mu    sync.Mutex
	limit int
	b     []byte
}

func (l *startLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.limit - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *startLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(string(l.b))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls the emulator until it answers: it starts in a second or
// two, and nothing signals when it is up. An emulator that ends first is
// reported with what it said.
func waitReady(endpoint string, limit time.Duration, exited <-chan struct{}, said fmt.Stringer) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/moto-api/", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not answering on %s after %s", endpoint, limit)
		case <-exited:
			return fmt.Errorf("ended before it answered: %s", said)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
