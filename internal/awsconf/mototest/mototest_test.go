package mototest

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// An emulator that ends before it answers is reported with what it said,
// at once, not after the minute it is given to start.
func TestAnEmulatorThatEndsIsReportedWithWhatItSaid(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo 'serve.py patches moto 5.2, not 9.9' >&2; exit 1")
	said := &startLog{limit: 16}
	cmd.Stderr = said
	if err := cmd.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	// Nothing listens on port 1 of the loopback.
	err := waitReady("http://127.0.0.1:1", time.Hour, exited, said)
	if err == nil || !strings.Contains(err.Error(), "ended before it answered: serve.py patches") {
		t.Fatalf("got %v, want the start's first 16 bytes", err)
	}
}
