package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/api"
	"github.com/bullpen-ci/bullpen/internal/cloud/local"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

const localConfig = `runners:
  small:
    image: ubuntu24-full-x64
pools:
  reuse:
    runner: small
    reuse: true
    max-jobs-per-instance: 5
  once:
    runner: small
`

// fakeRunner stands in for GitHub's runner: it says its job started, works
// for a few seconds, and exits (a just-in-time runner serves one job).
const fakeRunner = `#!/bin/sh
echo "Running job: $1"
sleep 3
`

// localStack is bullpen serve --cloud local and what the test needs of it.
type localStack struct {
	*server
	dir  string   // --local-dir
	port string   // serve's, kept over a restart for the agents to find it
	args []string // serve's flags, for a restart
	seq  int
}

func startLocal(t *testing.T) *localStack {
	t.Helper()
	dir := t.TempDir()
	runner := filepath.Join(dir, "fake-runner.sh")
	if err := os.WriteFile(runner, []byte(fakeRunner), 0o755); err != nil {
		t.Fatal(err)
	}
	machines, port := filepath.Join(dir, "machines"), freePort(t)
	args := []string{"--store", "sqlite://" + filepath.Join(dir, "bullpen.db"), "--listen", "127.0.0.1:" + port,
		"--cloud", "local", "--local-dir", machines, "--environment", "e2e",
		"--converge-every", "500ms", "--terminate-every", "500ms", "--reap-every", "500ms",
		"--silent-after", "3s", "--orphan-grace", "1s", "--gone-grace", "2s",
		"--local-agent-env", "BULLPEN_AGENT_RUNNER_COMMAND=" + runner + " {jitconfig}",
		"--local-agent-env", "BULLPEN_AGENT_HEARTBEAT_INTERVAL=500ms",
		"--local-agent-env", "BULLPEN_AGENT_POLL_WAIT=2s"}
	return &localStack{server: startServerWith(t, localConfig, args...), dir: machines, port: port, args: args}
}

// restart starts serve again, after a stop, on the same store, directory
// and port, with extra flags.
func (l *localStack) restart(extra ...string) {
	l.t.Helper()
	l.eventually("serve's port free again", 30*time.Second, func() bool {
		ln, err := net.Listen("tcp", "127.0.0.1:"+l.port)
		return err == nil && ln.Close() == nil
	})
	l.server = startServerWith(l.t, localConfig, append(slices.Clone(l.args), extra...)...)
}

// queue posts a signed queued delivery for one job of pool and returns its id.
func (l *localStack) queue(pool string) int64 {
	l.t.Helper()
	l.seq++
	id := 5_000_000 + l.seq
	body := queuedFor(l.t, 1, id, "runs-on=%d/pool="+pool+"/env=e2e")[0]
	if code, resp := l.post(fmt.Sprintf("q-%d", id), body, testfixtures.GoSign(l.secret, body)); code != http.StatusAccepted {
		l.t.Fatalf("queue job %d: %d %s", id, code, resp)
	}
	return int64(id)
}

// complete posts a signed completed delivery for job id.
func (l *localStack) complete(id int64, conclusion string) {
	l.t.Helper()
	body := []byte(fmt.Sprintf(`{"action":"completed","workflow_job":{"id":%d,"run_id":%d,"labels":[],"status":"completed","conclusion":%q},"repository":{"full_name":"octo-org/octo-repo"}}`,
		id, id+1_000_000, conclusion))
	if code, resp := l.post(fmt.Sprintf("c-%d", id), body, testfixtures.GoSign(l.secret, body)); code != http.StatusAccepted {
		l.t.Fatalf("complete job %d: %d %s", id, code, resp)
	}
}

// job returns the job, or a zero one while the intake has not recorded it.
func (l *localStack) job(id int64) api.JobView {
	for _, j := range l.jobs() {
		if j.ID == id {
			return j
		}
	}
	return api.JobView{}
}

func (l *localStack) instance(id string) api.InstanceView {
	for _, in := range l.instances() {
		if in.ID == id {
			return in
		}
	}
	l.t.Fatalf("no instance %s", id)
	return api.InstanceView{}
}

func (l *localStack) waitJob(id int64, status string) api.JobView {
	l.t.Helper()
	return await(l.server, fmt.Sprintf("job %d %s", id, status), 60*time.Second, func() (api.JobView, bool) {
		j := l.job(id)
		return j, j.Status == status
	})
}

func (l *localStack) waitInstance(id, state string) api.InstanceView {
	l.t.Helper()
	return await(l.server, fmt.Sprintf("instance %s %s", id, state), 60*time.Second, func() (api.InstanceView, bool) {
		in := l.instance(id)
		return in, in.State == state
	})
}

// agentPIDs returns the pids of processes whose command line mentions path.
func agentPIDs(t *testing.T, path string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), path) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killMachines ends the process groups of the agents of machines in dir.
func killMachines(t *testing.T, dir string) {
	for _, pid := range agentPIDs(t, dir) {
		_ = syscall.Kill(-pid, syscall.SIGKILL) // its group: the agent leads one
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func TestServeLocalEndToEnd(t *testing.T) {
	l := startLocal(t)

	// A reusing pool: the instance that served a job deregisters, goes back
	// to the pool, and serves the next one.
	a := l.queue("reuse")
	first := l.waitJob(a, "completed")
	l.complete(a, "success") // GitHub's webhook after the agent's own report: harmless
	inst := l.waitInstance(first.InstanceID, "ready")
	b := l.queue("reuse")
	second := l.waitJob(b, "completed")
	if second.InstanceID != first.InstanceID {
		t.Fatalf("job %d ran on %s, not on the released %s", b, second.InstanceID, first.InstanceID)
	}
	if in := l.waitInstance(inst.ID, "ready"); in.JobsServed != 2 {
		t.Fatalf("reused instance served %d jobs, want 2", in.JobsServed)
	}

	// A one-job pool: the instance is terminated after its job.
	c := l.queue("once")
	once := l.waitJob(c, "completed")
	l.waitInstance(once.InstanceID, "terminated")

	// An agent killed mid-job: its instance falls silent and the reaper
	// terminates it.
	d := l.queue("once")
	running := l.waitJob(d, "running")
	victim := l.instance(running.InstanceID)
	envFile := filepath.Join(l.dir, victim.CloudID, "agent.env")
	pids := agentPIDs(t, envFile)
	if len(pids) == 0 {
		t.Fatalf("no agent process for %s", victim.CloudID)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	killed := l.waitInstance(victim.ID, "terminated")
	if !strings.Contains(killed.Reason, "silent") && !strings.Contains(killed.Reason, "gone") {
		t.Errorf("killed agent's instance ended for %q", killed.Reason)
	}
	l.complete(d, "failure")
	l.waitJob(d, "completed")

	// A machine with this stack's tag that bullpen never created is reaped:
	// another process recorded it as the local provider documents, its
	// process known by the path of its agent.env on its command line.
	const orphanID = "l-0000000ff0ff"
	orphanDir := filepath.Join(l.dir, orphanID)
	orphan := exec.Command("sh", "-c", "sleep 600", filepath.Join(orphanDir, "agent.env"))
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	writeLocalRecord(t, orphanDir, local.Record{ID: orphanID, PID: orphan.Process.Pid,
		Tags: map[string]string{domain.TagController: "bullpen-e2e"}, LaunchedAt: time.Now().Add(-time.Hour)})
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		_ = orphan.Process.Kill()
		t.Fatalf("the orphan machine was not reaped\n%s", l.logs.String())
	}

	// A shutdown leaves the machines running, as a cloud's outlive their
	// control plane: serve restarted on the store and the directory adopts
	// the warm one and serves the next job on it. (The agent's retries back
	// off while serve is down, so silence is given longer.)
	if err := l.stop(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v\n%s", err, l.logs.String())
	}
	if len(agentPIDs(t, filepath.Join(l.dir, inst.CloudID, "agent.env"))) == 0 {
		t.Fatalf("the warm machine's agent ended with serve")
	}
	l.restart("--silent-after", "30s")
	e := l.queue("reuse")
	if third := l.waitJob(e, "completed"); third.InstanceID != inst.ID {
		t.Fatalf("after a restart, job %d ran on %s, not on the warm %s\n%s", e, third.InstanceID, inst.ID, l.logs.String())
	}
}

// writeLocalRecord writes r as the local provider's record of a machine in
// dir, as a process other than the provider would.
func writeLocalRecord(t *testing.T, dir string, r local.Record) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Written whole, then renamed, so the provider never reads half of it.
	tmp := filepath.Join(dir, ".record")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, local.RecordFile)); err != nil {
		t.Fatal(err)
	}
}
