package local

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// startTied starts cmd so that it is sent SIGTERM when this process ends,
// however it ends (a crash, SIGKILL): the machines of a temporary directory
// end with their control plane, as Close would have ended them. Linux sends
// a parent-death signal when the thread that started the process exits, not
// the process: cmd is started from a thread kept for it, which lives as long
// as this process does.
func startTied(cmd *exec.Cmd) error {
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	return onTiedThread(cmd.Start)
}

// tiedThread runs calls on one OS thread that never exits.
var tiedThread struct {
	once  sync.Once
	calls chan func()
}

func onTiedThread(f func() error) error {
	tiedThread.once.Do(func() {
		tiedThread.calls = make(chan func())
		go func() {
			// Never unlocked, and the goroutine never returns: the runtime
			// would end a locked thread whose goroutine is gone, and send
			// every process started from it its parent-death signal.
			runtime.LockOSThread()
			for call := range tiedThread.calls {
				call()
			}
		}()
	})
	done := make(chan error, 1)
	tiedThread.calls <- func() { done <- f() }
	return <-done
}
