package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/api"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

const e2eConfig = `runners:
  small-x64:
    image: ubuntu24-full-x64
    ram: 1
    family: [t3]
pools:
  small-x64:
    runner: small-x64
    schedule:
      - name: default
        stopped: 3
`

// server is `bullpen serve` running as a process.
type server struct {
	t      *testing.T
	cmd    *exec.Cmd
	base   string
	token  string
	secret string
	logs   *testlog.Buffer
	done   chan error
}

// buildBinary compiles bullpen once per test binary.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "bullpen-e2e-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bullpen")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func startServer(t *testing.T) *server {
	t.Helper()
	return startServerWith(t, e2eConfig, "--sim-latency", "zero", "--converge-every", "500ms", "--terminate-every", "500ms")
}

// startServerWith runs bullpen serve on config with extra flags.
func startServerWith(t *testing.T, config string, extra ...string) *server {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := writeFile(t, dir, "runs-on.yml", config)
	s := &server{t: t, token: "e2e-admin-token-0123", secret: "e2e webhook secret", logs: &testlog.Buffer{}, done: make(chan error, 1)}
	args := append([]string{"serve", "--config", cfg, "--store", "sqlite://" + filepath.Join(dir, "bullpen.db"),
		"--listen", "127.0.0.1:0"}, extra...)
	s.cmd = exec.Command(bin, args...)
	s.cmd.Env = append(os.Environ(), "BULLPEN_WEBHOOK_SECRET="+s.secret, "BULLPEN_ADMIN_TOKEN="+s.token)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`msg="bullpen serving" listen=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.logs.Write([]byte(line + "\n"))
			if m := re.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
	}()
	go func() { s.done <- s.cmd.Wait() }()
	// Local machines outlive serve with --local-dir (for the next serve
	// to adopt): end them once serve has stopped.
	if i := slices.Index(extra, "--local-dir"); i >= 0 && i+1 < len(extra) {
		t.Cleanup(func() { killMachines(t, extra[i+1]) })
	}
	t.Cleanup(func() { s.stop() })
	select {
	case a := <-addr:
		s.base = "http://" + a
	case err := <-s.done:
		t.Fatalf("serve exited at start: %v\n%s", err, s.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not start\n%s", s.logs.String())
	}
	return s
}

// stop sends SIGTERM and waits for a clean exit; it reports whether the
// process exited 0.
func (s *server) stop() error {
	if s.cmd.ProcessState != nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		return err
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		return fmt.Errorf("serve did not stop within 30 s after SIGTERM")
	}
}

func (s *server) get(path string, v any) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		s.t.Fatal(err)
	}
}

func (s *server) post(delivery string, body []byte, signature string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.base+"/webhook", bytes.NewReader(body))
	req.Header.Set("X-GitHub-Event", "workflow_job")
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-Hub-Signature-256", signature)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually polls cond (a real process can only be observed from outside)
// until it holds or the deadline passes.
func (s *server) eventually(what string, timeout time.Duration, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: not reached within %s\n%s", what, timeout, s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// await is eventually for a condition on what read reads: it returns what
// read read last, the value that met the condition.
func await[T any](s *server, what string, timeout time.Duration, read func() (T, bool)) T {
	s.t.Helper()
	var v T
	s.eventually(what, timeout, func() bool {
		var done bool
		v, done = read()
		return done
	})
	return v
}

// poolCounts is what serve counts of pool's instances, by kind
// ("ready_hot", "stopped", …); nil when it has no such pool.
func (s *server) poolCounts(pool string) map[string]int {
	s.t.Helper()
	var pools struct {
		Pools []struct {
			Name   string
			Counts map[string]int
		}
	}
	s.get("/api/v1/pools", &pools)
	for _, p := range pools.Pools {
		if p.Name == pool {
			return p.Counts
		}
	}
	return nil
}

// jobs is the latest 1000 jobs as the status API shows them.
func (s *server) jobs() []api.JobView {
	s.t.Helper()
	var list struct{ Jobs []api.JobView }
	s.get("/api/v1/jobs?limit=1000", &list)
	return list.Jobs
}

// instances is every instance as the status API shows it, terminated ones
// included.
func (s *server) instances() []api.InstanceView {
	s.t.Helper()
	var list struct{ Instances []api.InstanceView }
	s.get("/api/v1/instances?all=1&limit=1000", &list)
	return list.Instances
}

// queuedPayloads turns @octokit/webhooks-examples' workflow_job payloads into
// n queued deliveries for bullpen: real shapes, labels rewritten to a pool
// label pinned to the run, fresh job and run ids.
func queuedPayloads(t *testing.T, n int) [][]byte {
	return queuedFor(t, n, 9_000_000, "runs-on=%d/pool=small-x64")
}

// queuedFor is queuedPayloads with the first job id and a label format
// (%d is the run id).
func queuedFor(t *testing.T, n int, first int, label string) [][]byte {
	var out [][]byte
	for i := range n {
		id, run := int64(first+i), int64(first+1_000_000+i)
		out = append(out, testfixtures.Payload(testfixtures.Job{ID: id, RunID: run, Labels: []string{fmt.Sprintf(label, run)}}))
	}
	return out
}

func TestServeEndToEnd(t *testing.T) {
	s := startServer(t)
	var pools struct {
		Pools []struct {
			Name   string         `json:"name"`
			Counts map[string]int `json:"counts"`
		} `json:"pools"`
	}
	s.eventually("pool filled", 60*time.Second, func() bool {
		s.get("/api/v1/pools", &pools)
		return len(pools.Pools) == 1 && pools.Pools[0].Counts["stopped"] == 3
	})

	const n = 5 // three served by the pool, two overflow to cold starts
	bodies := queuedPayloads(t, n)
	sigs := signAll(s.secret, bodies)

	// A tampered body is refused and changes nothing.
	tampered := bytes.Replace(bodies[0], []byte(`"queued"`), []byte(`"queueD"`), 1)
	if code, body := s.post("tampered", tampered, sigs[0]); code != http.StatusUnauthorized {
		t.Fatalf("tampered body: %d %s", code, body)
	}
	for i, b := range bodies {
		if code, body := s.post(fmt.Sprintf("delivery-%d", i), b, sigs[i]); code != http.StatusAccepted {
			t.Fatalf("delivery %d: %d %s", i, code, body)
		}
	}
	// Redeliveries (same delivery id, then a new one) change nothing.
	if code, _ := s.post("delivery-0", bodies[0], sigs[0]); code != http.StatusAccepted {
		t.Fatalf("redelivery: %d", code)
	}
	if code, _ := s.post("delivery-0-again", bodies[0], sigs[0]); code != http.StatusAccepted {
		t.Fatalf("redelivery with a new id: %d", code)
	}

	var jobs []api.JobView
	s.eventually("every job assigned", 60*time.Second, func() bool {
		jobs = s.jobs()
		assigned := 0
		for _, j := range jobs {
			if j.Status == "assigned" || j.Status == "running" {
				assigned++
			}
		}
		return assigned == n
	})
	if len(jobs) != n {
		t.Fatalf("%d jobs recorded, want %d (a tampered body or a redelivery made one)", len(jobs), n)
	}
	seen := map[string]int64{}
	via := map[string]int{}
	for _, j := range jobs {
		if j.InstanceID == "" {
			t.Fatalf("job %d has no instance", j.ID)
		}
		if other, dup := seen[j.InstanceID]; dup {
			t.Fatalf("instance %s serves jobs %d and %d", j.InstanceID, other, j.ID)
		}
		seen[j.InstanceID] = j.ID
		via[j.Via]++
	}
	if via["stopped"] != 3 || via["cold"] != 2 {
		t.Fatalf("jobs served via %v, want 3 stopped pool members started and 2 cold starts", via)
	}
	if strings.Contains(s.logs.String(), s.secret) {
		t.Fatal("the webhook secret appears in the logs")
	}
	if err := s.stop(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v\n%s", err, s.logs.String())
	}
	if !strings.Contains(s.logs.String(), "bullpen stopped") {
		t.Fatalf("no clean shutdown in the logs:\n%s", s.logs.String())
	}
}

func TestServeRefusesToStartWithoutSecrets(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), bin, "serve", "--config", "../../examples/runs-on.yml")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("serve started without a webhook secret or admin token")
	}
	for _, want := range []string{"no webhook secret: set $BULLPEN_WEBHOOK_SECRET", "no admin token: set $BULLPEN_ADMIN_TOKEN"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("message lacks %q:\n%s", want, out)
		}
	}
}

// signAll signs bodies as GitHub does (HMAC-SHA256 under the secret).
func signAll(secret string, bodies [][]byte) []string {
	sigs := make([]string, len(bodies))
	for i, b := range bodies {
		sigs[i] = testfixtures.GoSign(secret, b)
	}
	return sigs
}

// With --sim-jobs-per-minute the simulated GitHub queues jobs for the
// pools served, so that jobs can be watched going through serve with no
// GitHub: they are taken in, assigned and started.
func TestServeQueuesSimulatedJobs(t *testing.T) {
	s := startServerWith(t, e2eConfig, "--sim-latency", "zero", "--converge-every", "500ms", "--sim-jobs-per-minute", "600")
	s.eventually("a simulated job running", 30*time.Second, func() bool {
		var got struct{ Jobs []api.JobView }
		s.get("/api/v1/jobs?status=running&pool=small-x64", &got)
		return len(got.Jobs) > 0
	})
	if !strings.Contains(s.logs.String(), `msg="the simulated GitHub queues jobs" per_minute=600`) {
		t.Errorf("serve did not say it queues simulated jobs:\n%s", s.logs.String())
	}
}
