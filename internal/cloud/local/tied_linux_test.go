package local

import (
	"runtime"
	"syscall"
	"testing"
)

// Tied processes are all started from one thread, whichever goroutine asks,
// and not from the asker's: a goroutine locked to its thread that ends takes
// the thread with it, and Linux would then send the parent-death signal to
// every process started from that thread while the control plane runs on.
func TestTiedProcessesAreStartedFromOneLastingThread(t *testing.T) {
	var tied, askers []int
	for range 3 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			askers = append(askers, syscall.Gettid())
			_ = onTiedThread(func() error {
				tied = append(tied, syscall.Gettid())
				return nil
			})
		}()
		<-done
	}
	for i, tid := range tied {
		if tid != tied[0] || tid == askers[i] {
			t.Fatalf("started from threads %v, asked from %v: want one thread, none of the askers'", tied, askers)
		}
	}
}
