//go:build !linux

package local

import "os/exec"

// startTied starts cmd. Only Linux can have a process signalled when its
// parent ends: elsewhere the machines of a temporary directory outlive a
// control plane that crashes (Close still ends them).
func startTied(cmd *exec.Cmd) error { return cmd.Start() }
