package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
)

// gone reports whether pid has exited (a zombie waiting for its reaper
// counts as gone).
func gone(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] == "Z"
}

// Stopping a command stops what it started too: a shell's children, which
// the shell's death would otherwise orphan.
func TestStoppingACommandStopsItsChildren(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := filepath.Join(dir, "tree.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho $$ > \""+pidFile+"\"\nexec sleep 1000\n"), 0o755)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := agent.Exec{Grace: time.Second}.Start(ctx, agent.Command{Line: "sh " + agent.ShellQuote(script) + "; echo after"})
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command never started its child")
		}
		data, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
	}
	cancel()
	if err := p.Wait(); err == nil {
		t.Fatal("a stopped command reported success")
	}
	for deadline := time.Now().Add(10 * time.Second); !gone(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command's child %d outlived it", pid)
		}
	}
}
