//go:build !linux

package agent

import (
	"os"
	"syscall"
	"time"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// stopTree stops the command itself; its children are left to the
// process group's supervisor.
func stopTree(pid int, grace time.Duration) {
	p, err := os.FindProcess(pid)
	if err != nil {
		return
	}
	_ = p.Signal(syscall.SIGTERM)
	time.AfterFunc(grace, func() { _ = p.Kill() })
}
