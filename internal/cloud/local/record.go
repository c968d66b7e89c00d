package local

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// RecordFile is the name of a machine's record in its directory.
const RecordFile = "machine.json"

// Record is what the provider knows of a machine, kept as RecordFile in
// the machine's directory; the package comment describes the format.
type Record struct {
	// ID is the cloud id; it must be the name of the machine's directory.
	ID string `json:"id"`
	// State is the state the machine was left in. Empty means running
	// when PID is set, stopped otherwise.
	State domain.CloudState `json:"state,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
	// InstanceType and UsageClass default to the package's constants.
	InstanceType string `json:"instance_type,omitempty"`
	UsageClass   string `json:"usage_class,omitempty"`
	// LaunchedAt is the last start; zero means the moment it is adopted.
	LaunchedAt time.Time `json:"launched_at,omitzero"`
	// PID is the machine's process, the leader of a process group of its
	// own (so its pid is the group's id); zero when it has none.
	PID int `json:"pid,omitempty"`
	// StartTime tells PID's process from a later one that reuses the pid:
	// the 22nd field of /proc/<pid>/stat (clock ticks after boot). Zero
	// means unknown: the process is then recognised by a command line
	// argument that contains the machine's env file path.
	StartTime uint64 `json:"start_time,omitempty"`
}

// withDefaults fills in the fields a record may leave unset.
func (r Record) withDefaults(now time.Time) Record {
	if r.State == "" {
		r.State = domain.CloudStopped
		if r.PID != 0 {
			r.State = domain.CloudRunning
		}
	}
	if r.InstanceType == "" {
		r.InstanceType = InstanceType
	}
	if r.UsageClass == "" {
		r.UsageClass = UsageClass
	}
	if r.LaunchedAt.IsZero() {
		r.LaunchedAt = now
	}
	return r
}

var knownStates = map[domain.CloudState]bool{
	domain.CloudPending: true, domain.CloudRunning: true, domain.CloudStopping: true,
	domain.CloudStopped: true, domain.CloudShuttingDown: true, domain.CloudTerminated: true,
}

func (r Record) validate() error {
	switch {
	case !validID(r.ID):
		return fmt.Errorf("id %q is not a plain name of letters, digits and ._-", r.ID)
	case r.State != "" && !knownStates[r.State]:
		return fmt.Errorf("unknown state %q", r.State)
	case r.PID < 0 || r.PID == 1:
		return fmt.Errorf("pid %d cannot be a machine's", r.PID)
	}
	return nil
}

// validID accepts ids that are safe as a directory name and are not hidden
// (the Cloud's own files in Dir are).
func validID(id string) bool {
	if id == "" || len(id) > 128 || id[0] == '.' {
		return false
	}
	return strings.Trim(id, idChars) == ""
}

const idChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

// readRecord reads and checks the record in a machine's directory, whose
// name must be the record's id.
func readRecord(dir string) (Record, error) {
	b, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if err != nil {
		return Record{}, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("parse %s: %w", RecordFile, err)
	}
	if err := r.validate(); err != nil {
		return Record{}, err
	}
	if name := filepath.Base(dir); r.ID != name {
		return Record{}, fmt.Errorf("id %q differs from its directory's name %q", r.ID, name)
	}
	return r, nil
}

// writeRecord replaces the record in a machine's directory whole, so that
// a reader, or a Cloud after a crash, sees the old record or the new one
// and never a part. It does not sync: the record has to survive a crash of
// the control plane, not of the host, which would take the machines'
// processes with it.
func writeRecord(dir string, r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the record: %w", err)
	}
	f, err := os.CreateTemp(dir, ".machine-*.json") // mode 0600
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, RecordFile))
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return nil
}

// record is the machine's Record as it is now.
func (m *machine) record() Record {
	r := Record{
		ID:           m.inst.ID,
		State:        m.inst.State,
		Tags:         maps.Clone(m.inst.Tags),
		InstanceType: m.inst.InstanceType,
		UsageClass:   m.inst.UsageClass,
		LaunchedAt:   m.inst.LaunchedAt,
	}
	if p := m.proc; p != nil && !p.drained {
		r.PID, r.StartTime = p.pgid, p.startTime
	}
	return r
}

// save writes the machine's record after a change. A machine whose
// directory is being removed is not written again. A failure is logged
// (the machine is as the Cloud says; only a later Cloud would see it
// otherwise) and returned for the callers that must not go on. Called under
// c.mu.
func (c *Cloud) save(m *machine) error {
	if m.removing {
		return nil
	}
	if err := writeRecord(m.paths.Dir, m.record()); err != nil {
		c.log.Warn("local machine: write its record", "instance", m.inst.ID, "err", err)
		return fmt.Errorf("record %s: %w", m.inst.ID, err)
	}
	return nil
}
