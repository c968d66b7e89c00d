//go:build unix

package agent

import (
	"errors"
	"os"
	"syscall"
)

// lockDir takes an exclusive lock on dir, held until unlock or the
// process's end (the kernel drops it with the descriptor, so a killed
// agent leaves no stale lock).
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, err
	}
	return func() { f.Close() }, nil
}
