package agent

import "syscall"

// sysProcAttr kills a command if the agent dies before it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
