package local

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// writeMachine records a machine in dir, the Dir of a Cloud, creating the
// machine's directory: a Cloud using dir adopts it at its next List (or
// call naming its id), as a machine created behind the provider's back.
// Unset fields get their defaults (see Record). When PID is set, its
// process must run in a process group of its own (exec.Cmd's
// SysProcAttr.Setpgid), and a zero StartTime is read from /proc; a PID
// that no longer runs is recorded as it is, and found stopped.
func writeMachine(dir string, r Record) error {
	r = r.withDefaults(time.Now().UTC())
	if r.PID > 1 {
		if info, ok := readProcStat(r.PID); ok && !info.dead() {
			if info.pgid != r.PID {
				return fmt.Errorf("write machine %s: process %d is not the leader of its own process group", r.ID, r.PID)
			}
			if r.StartTime == 0 {
				r.StartTime = info.startTime
			}
		}
	}
	if err := r.validate(); err != nil {
		return fmt.Errorf("write machine %s: %w", r.ID, err)
	}
	mdir := filepath.Join(dir, r.ID)
	if err := os.MkdirAll(mdir, 0o700); err != nil {
		return fmt.Errorf("write machine %s: %w", r.ID, err)
	}
	if err := writeRecord(mdir, r); err != nil {
		return fmt.Errorf("write machine %s: %w", r.ID, err)
	}
	return nil
}
