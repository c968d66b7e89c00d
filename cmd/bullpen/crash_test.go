package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

const crashConfig = `runners:
  small:
    image: ubuntu24-full-x64
pools:
  warm:
    runner: small
    schedule:
      - name: default
        hot: 2
  cold:
    runner: small
`

// crashRunner stands in for GitHub's runner: it notes its just-in-time
// config (which names its runner, so its job and instance) in a log the
// machines share, says its job started, and works long enough for a crash
// to land while jobs run.
const crashRunner = `#!/bin/sh
echo "$1" >> "$(dirname "$0")/runs.log"
echo "Running job: $1"
sleep 4
`

// crashStack is serve --cloud local on a fixed port, store and machine
// directory, so that it can be killed and started again on them: the
// machines (agent processes) outlive it and reach it at the same address.
type crashStack struct {
	t                      *testing.T
	store, machines, port  string
	runner                 string
	s                      *server
	starts                 int
	deliveries             map[string][]byte
	accepted, resent, sent int
}

func newCrashStack(t *testing.T) *crashStack {
	dir := t.TempDir()
	c := &crashStack{t: t, store: filepath.Join(dir, "bullpen.db"), machines: filepath.Join(dir, "machines"),
		runner: filepath.Join(dir, "runner.sh"), port: freePort(t), deliveries: map[string][]byte{}}
	if err := os.WriteFile(c.runner, []byte(crashRunner), 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func (c *crashStack) start() time.Time {
	c.t.Helper()
	c.starts++
	c.s = startServerWith(c.t, crashConfig, "--store", "sqlite://"+c.store, "--listen", "127.0.0.1:"+c.port,
		"--cloud", "local", "--local-dir", c.machines, "--environment", "crash",
		"--converge-every", "500ms", "--terminate-every", "500ms", "--reap-every", "1s", "--redelivery-after", "3s",
		"--silent-after", "20s", "--orphan-grace", "5s", "--gone-grace", "5s",
		"--local-agent-env", "BULLPEN_AGENT_RUNNER_COMMAND="+c.runner+" {jitconfig}",
		"--local-agent-env", "BULLPEN_AGENT_HEARTBEAT_INTERVAL=500ms",
		"--local-agent-env", "BULLPEN_AGENT_POLL_WAIT=2s")
	return time.Now()
}

// kill stops serve with SIGKILL, the process alone: its machines live on.
func (c *crashStack) kill(at string) {
	c.t.Helper()
	if err := c.s.cmd.Process.Kill(); err != nil {
		c.t.Fatal(err)
	}
	<-c.s.done
	c.t.Logf("kill -9 %s", at)
}

// deliver posts queued deliveries for jobs first.. of pool; each that is
// not accepted is kept for GitHub's redelivery.
func (c *crashStack) deliver(pool string, first, n int) {
	c.t.Helper()
	for i, body := range queuedFor(c.t, n, first, "runs-on=%d/pool="+pool) {
		id := fmt.Sprintf("crash-%d", first+i)
		c.deliveries[id] = body
		c.sent++
		if code, _ := c.s.post(id, body, testfixtures.GoSign(c.s.secret, body)); code == http.StatusAccepted {
			c.accepted++
		}
	}
}

// redeliver sends every delivery again, as GitHub redelivers those it saw
// fail: bullpen must take each job once however often it hears of it.
func (c *crashStack) redeliver() {
	c.t.Helper()
	for id, body := range c.deliveries {
		if code, resp := c.s.post(id, body, testfixtures.GoSign(c.s.secret, body)); code != http.StatusAccepted {
			c.t.Fatalf("redeliver %s: %d %s", id, code, resp)
		}
		c.resent++
	}
}

type crashJob struct {
	ID          int64      `json:"id"`
	Status      string     `json:"status"`
	InstanceID  string     `json:"instance_id"`
	Via         string     `json:"via"`
	Conclusion  string     `json:"conclusion"`
	StartedAt   *time.Time `json:"started_at"`
	CompletedAt *time.Time `json:"completed_at"`
}

func (c *crashStack) jobs() []crashJob {
	var list struct{ Jobs []crashJob }
	c.s.get("/api/v1/jobs?limit=1000", &list)
	return list.Jobs
}

func (c *crashStack) instances() []apiInstance {
	var list struct{ Instances []apiInstance }
	c.s.get("/api/v1/instances?all=1", &list)
	return list.Instances
}

func (c *crashStack) count(cond func(crashJob) bool) int {
	n := 0
	for _, j := range c.jobs() {
		if cond(j) {
			n++
		}
	}
	return n
}

// TestServeSurvivesKillNine kills serve three times in a burst of signed
// jobs — with deliveries accepted but not taken in, with machines being
// created, with jobs running — restarts it on the same store and machines,
// and checks that every job ran once, none was stranded, no machine leaked
// or was killed under its job, and no instance served two jobs at once.
func TestServeSurvivesKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts serve five times")
	}
	begin := time.Now()
	c := newCrashStack(t)
	c.start()
	c.s.eventually("the warm pool is ready", 60*time.Second, func() bool { return c.readyHot("warm") == 2 })

	const first, half = 7_000_001, 12
	c.deliver("warm", first, half/2)
	c.deliver("cold", first+half/2, half/2)
	c.kill("right after the first deliveries were accepted")

	restarted := c.start()
	c.deliver("warm", first+half, half/2)
	c.deliver("cold", first+half+half/2, half/2)
	c.s.eventually("machines are being created", 60*time.Second, func() bool {
		for _, in := range c.instances() {
			if in.State == string(domain.StatePending) || in.State == string(domain.StateBooting) {
				return true
			}
		}
		return false
	})
	c.kill("while machines were being created")
	t.Logf("restart 1 → creating machines again in %s", time.Since(restarted).Round(time.Millisecond))

	restarted = c.start()
	c.s.eventually("jobs are running", 90*time.Second, func() bool {
		return c.count(func(j crashJob) bool { return j.Status == "running" }) >= 2
	})
	c.kill("while jobs were running")
	t.Logf("restart 2 → jobs running again in %s", time.Since(restarted).Round(time.Millisecond))

	restarted = c.start()
	c.redeliver()
	total := 2 * half
	c.s.eventually("every job is done", 3*time.Minute, func() bool {
		return c.count(func(j crashJob) bool { return j.Status == "completed" }) == total
	})
	t.Logf("restart 3 → all %d jobs done in %s", total, time.Since(restarted).Round(time.Millisecond))

	c.checkServedOnce(total)
	c.s.eventually("no machine left over", 60*time.Second, c.machinesMatchInstances)
	created, reused := c.instanceFigures()
	t.Logf("%d deliveries sent, %d accepted before a crash took them, %d redelivered; %d jobs; %d instances created, %d jobs on reused or pool instances; %d starts of serve; %s in all",
		c.sent, c.accepted, c.resent, total, created, reused, c.starts, time.Since(begin).Round(time.Second))
	if err := c.s.stop(); err != nil {
		t.Fatalf("serve did not stop cleanly: %v", err)
	}
}

func (c *crashStack) readyHot(pool string) int {
	var pools struct {
		Pools []struct {
			Name   string
			Counts map[string]int
		}
	}
	c.s.get("/api/v1/pools", &pools)
	for _, p := range pools.Pools {
		if p.Name == pool {
			return p.Counts["ready_hot"]
		}
	}
	return 0
}

// checkServedOnce: each job's runner started once, on the instance the
// job names, it succeeded, and no instance held two jobs at once.
func (c *crashStack) checkServedOnce(total int) {
	c.t.Helper()
	starts := c.runnerStarts()
	byInstance := map[string][]crashJob{}
	jobs := c.jobs()
	if len(jobs) != total {
		c.t.Errorf("%d jobs recorded, want %d", len(jobs), total)
	}
	for _, j := range jobs {
		if on := starts[j.ID]; len(on) != 1 || on[0] != j.InstanceID {
			c.t.Errorf("job %d: runner started on %v, want once on %s", j.ID, on, j.InstanceID)
		}
		// The agent reports how its runner exited; GitHub's completed
		// delivery, when it comes, says success.
		if (j.Conclusion != "success" && j.Conclusion != "exit status 0") || j.StartedAt == nil || j.CompletedAt == nil {
			c.t.Errorf("job %d ended %q (started %v, completed %v)", j.ID, j.Conclusion, j.StartedAt, j.CompletedAt)
			continue
		}
		byInstance[j.InstanceID] = append(byInstance[j.InstanceID], j)
	}
	for id, js := range byInstance {
		for i, a := range js {
			for _, b := range js[i+1:] {
				if a.StartedAt.Before(*b.CompletedAt) && b.StartedAt.Before(*a.CompletedAt) {
					c.t.Errorf("instance %s ran jobs %d and %d at once", id, a.ID, b.ID)
				}
			}
		}
	}
}

// runnerStarts reads, from the runners' shared log, the instance each
// job's runner was started on: a just-in-time config holds its runner's
// name, which names the instance and the job.
func (c *crashStack) runnerStarts() map[int64][]string {
	c.t.Helper()
	data, err := os.ReadFile(filepath.Join(filepath.Dir(c.runner), "runs.log"))
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[int64][]string{}
	for _, line := range strings.Fields(string(data)) {
		name, err := jitRunnerName(line)
		if err != nil {
			c.t.Errorf("runner log: %v", err)
			continue
		}
		if inst, job, ok := domain.ParseRunnerName(name); ok {
			out[job] = append(out[job], inst)
		}
	}
	return out
}

// jitRunnerName reads the runner name out of a just-in-time config: base64
// JSON of files, whose .runner is base64 JSON with agentName.
func jitRunnerName(jit string) (string, error) {
	var files map[string]string
	var runner struct {
		AgentName string `json:"agentName"`
	}
	raw, err := base64.StdEncoding.DecodeString(jit)
	if err == nil {
		err = json.Unmarshal(raw, &files)
	}
	if err == nil {
		raw, err = base64.StdEncoding.DecodeString(files[".runner"])
	}
	if err == nil {
		err = json.Unmarshal(raw, &runner)
	}
	if err != nil {
		return "", fmt.Errorf("not a just-in-time config: %w", err)
	}
	return runner.AgentName, nil
}

// machinesMatchInstances: a machine's agent runs exactly when its instance
// is not terminated.
func (c *crashStack) machinesMatchInstances() bool {
	live := map[string]bool{}
	for _, in := range c.instances() {
		live[in.CloudID] = in.State != string(domain.StateTerminated)
	}
	dirs, err := os.ReadDir(c.machines)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		running := len(agentPIDs(c.t, filepath.Join(c.machines, d.Name(), "agent.env"))) > 0
		if running != live[d.Name()] {
			return false
		}
	}
	return true
}

func (c *crashStack) instanceFigures() (created, reused int) {
	for _, j := range c.jobs() {
		if j.Via != "cold" {
			reused++
		}
	}
	ended := map[string]int{}
	for _, in := range c.instances() {
		created++
		if in.JobsServed == 0 {
			ended[in.State+" "+in.Pool+" cloud="+strconv.FormatBool(in.CloudID != "")+": "+in.Reason]++
		}
	}
	c.t.Logf("instances that served no job, by state and reason: %v", ended)
	return created, reused
}
