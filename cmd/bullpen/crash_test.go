package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// crashStack is serve --cloud local on a fixed port, store and machine
// directory, so that it can be killed and started again on them: the
// machines (agent processes) outlive it and reach it at the same address.
type crashStack struct {
	t                     *testing.T
	store, machines, port string
	runner                string
	s                     *server
	starts                int
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
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

func (c *crashStack) readyHot(pool string) int { return c.s.poolCounts(pool)["ready_hot"] }

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
	for _, in := range c.s.instances() {
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
	for _, j := range c.s.jobs() {
		if j.Via != "cold" {
			reused++
		}
	}
	ended := map[string]int{}
	for _, in := range c.s.instances() {
		created++
		if in.JobsServed == 0 {
			ended[in.State+" "+in.Pool+" cloud="+strconv.FormatBool(in.CloudID != "")+": "+in.Reason]++
		}
	}
	c.t.Logf("instances that served no job, by state and reason: %v", ended)
	return created, reused
}
