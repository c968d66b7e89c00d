package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Files in the state directory.
const (
	identityFile      = "identity.json"       // the token: 0600
	proposedTokenFile = "proposed-token.json" // the token hello proposes, until identity.json holds it: 0600
	jobFile           = "job"                 // the job whose runner is running
	unreachableFile   = "unreachable.json"    // since when the control plane has not answered, while it does not
	firstBootFile     = "first-boot.json"     // the machine's first boot: the one its agent first ran in
)

// identity is what hello gave this machine, kept so that a stopped and
// started machine (or a restarted agent) needs no bootstrap secret again.
type identity struct {
	CloudID          string `json:"cloud_id"`
	InstanceID       string `json:"instance_id"`
	Token            string `json:"token"`
	HeartbeatSeconds int    `json:"heartbeat_seconds,omitempty"`
}

// errLocked: another process holds the state directory's lock.
var errLocked = errors.New("locked by another process")

// How long a held state directory is asked for again before the agent
// stops: a second of real time.
const (
	lockTries = 20
	lockRetry = 50 * time.Millisecond
)

// claimStateDir creates the directory (0700), takes its lock for this run
// (released by unlock), and checks that a file can be written there,
// before hello spends the one chance to get a token. A second agent on the
// machine is refused: both would run the runner of the same job.
func claimStateDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	unlock, err = lockDir(dir)
	for try := 0; errors.Is(err, errLocked) && try < lockTries; try++ {
		// A process forked elsewhere in the moment before it runs its
		// program holds a copy of the lock's descriptor, and an agent that
		// just stopped may still be closing it: ask again, briefly.
		time.Sleep(lockRetry)
		unlock, err = lockDir(dir)
	}
	if errors.Is(err, errLocked) {
		return nil, fmt.Errorf("state directory %s: %w", dir, ErrStateDirInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("state directory %s: lock: %w", dir, err)
	}
	probe := filepath.Join(dir, ".probe")
	if err := writeFileAtomic(probe, nil); err != nil {
		unlock()
		return nil, fmt.Errorf("state directory %s is not writable: %w", dir, err)
	}
	if err := os.Remove(probe); err != nil {
		unlock()
		return nil, fmt.Errorf("state directory %s: %w", dir, err)
	}
	return unlock, nil
}

// loadIdentity returns the saved identity; ok is false when there is none.
func loadIdentity(dir string) (identity, bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, fs.ErrNotExist) {
		return identity{}, false, nil
	}
	if err != nil {
		return identity{}, false, fmt.Errorf("read saved identity: %w", err)
	}
	var id identity
	if err := json.Unmarshal(data, &id); err != nil || id.Token == "" {
		return identity{}, false, fmt.Errorf("saved identity in %s is unreadable", dir)
	}
	return id, true, nil
}

func saveIdentity(dir string, id identity) error {
	data, err := json.Marshal(id)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, identityFile), data); err != nil {
		return fmt.Errorf("save identity: %w", err)
	}
	return nil
}

// writeFileAtomic writes a 0600 file that is never seen half written.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename, nothing to remove
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// markJob records that a runner runs job; clearJob that it no longer does.
// A mark found at start means the agent stopped while a runner ran.
func markJob(dir, job string) error {
	if err := writeFileAtomic(filepath.Join(dir, jobFile), []byte(job)); err != nil {
		return fmt.Errorf("job mark: %w", err)
	}
	return nil
}

func clearJob(dir string) error {
	err := os.Remove(filepath.Join(dir, jobFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("job mark: %w", err)
	}
	return nil
}

func markedJob(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, jobFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("job mark: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// proposal is the secret hello proposes for a machine's token. It is kept
// from before the first hello until the identity is saved: an agent
// restarted in between proposes it again and is given the same token,
// where a new secret would be refused (token_issued) and leave the machine
// without one.
type proposal struct {
	CloudID string `json:"cloud_id"`
	Token   string `json:"token"`
}

// proposedToken returns the secret kept for cloudID's token, or draws and
// keeps a new one.
func proposedToken(dir, cloudID string) (string, error) {
	path := filepath.Join(dir, proposedTokenFile)
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read the proposed token: %w", err)
	}
	var p proposal
	if err == nil && json.Unmarshal(data, &p) == nil && p.CloudID == cloudID && p.Token != "" {
		return p.Token, nil
	}
	p = proposal{CloudID: cloudID, Token: domain.NewSecret()}
	if data, err = json.Marshal(p); err == nil {
		err = writeFileAtomic(path, data)
	}
	if err != nil {
		return "", fmt.Errorf("keep the proposed token: %w", err)
	}
	return p.Token, nil
}

func dropProposedToken(dir string) error {
	err := os.Remove(filepath.Join(dir, proposedTokenFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// streak is the start of an unreachable streak, and the boot it began in.
type streak struct {
	Since  time.Time `json:"since"`
	BootID string    `json:"boot_id"`
}

func loadStreak(path string) (streak, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return streak{}, false, nil
	}
	var s streak
	if err == nil {
		err = json.Unmarshal(data, &s)
	}
	if err != nil {
		return streak{}, false, fmt.Errorf("read %s: %w", filepath.Base(path), err)
	}
	return s, true, nil
}

func saveStreak(path string, s streak) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data)
}

// bootID names the machine's current boot (Linux); "" where there is no
// such name, and then no streak is resumed.
func bootID() string {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// bootMark names the boot in which an agent first ran on a state directory,
// for the machine whose cloud id it holds.
type bootMark struct {
	CloudID string `json:"cloud_id"`
	BootID  string `json:"boot_id"`
}

// firstBoot reports whether boot is the machine cloudID's first: the boot
// in which an agent first ran on dir for it, which the first run records.
// A mark of another machine (a state directory baked into an image) counts
// for nothing. Where boots have no name (boot is ""), only the first run
// is in the first boot. When the mark cannot be read or kept, the answer
// is true, with the error: a warm-up told it is the first boot does all
// of its work.
func firstBoot(dir, cloudID, boot string) (bool, error) {
	path := filepath.Join(dir, firstBootFile)
	data, err := os.ReadFile(path)
	var mark bootMark
	switch {
	case err == nil && json.Unmarshal(data, &mark) == nil && mark.CloudID == cloudID:
		return boot != "" && mark.BootID == boot, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return true, fmt.Errorf("read the first boot's mark: %w", err)
	}
	if data, err = json.Marshal(bootMark{CloudID: cloudID, BootID: boot}); err == nil {
		err = writeFileAtomic(path, data)
	}
	if err != nil {
		return true, fmt.Errorf("keep the first boot's mark: %w", err)
	}
	return true, nil
}
