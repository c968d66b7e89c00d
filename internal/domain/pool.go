package domain

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Range is an inclusive min..max; a single value has Min == Max. Zero means
// "not constrained".
type Range struct {
	Min int `json:"min,omitempty"`
	Max int `json:"max,omitempty"`
}

// Volume is the root disk, written in the configuration as "gp3:30gb:125mbps:3000iops".
type Volume struct {
	Type           string `json:"type,omitempty"`
	SizeGB         int    `json:"size_gb,omitempty"`
	ThroughputMBps int    `json:"throughput_mbps,omitempty"`
	IOPS           int    `json:"iops,omitempty"`
}

// RunnerSpec is one entry of the configuration's `runners:` map: what machine
// to launch for a job or a pool.
type RunnerSpec struct {
	Name   string   `json:"name"`
	Image  string   `json:"image"`
	CPU    Range    `json:"cpu"`
	RAM    Range    `json:"ram"` // GiB
	Family []string `json:"family,omitempty"`
	Volume Volume   `json:"volume"`
	// Spot is "" for on-demand, or the spot allocation strategy.
	Spot string `json:"spot,omitempty"`
	// Retry is RunsOn's retry: "" or RetryWhenInterrupted re-runs a job
	// whose spot machine was taken back after it started, RetryNever
	// does not.
	Retry string `json:"retry,omitempty"`
}

// Retry settings of a runner.
const (
	RetryWhenInterrupted = "when-interrupted"
	RetryNever           = "false"
)

// RerunsInterrupted reports whether a job whose machine was interrupted
// after it started is re-run.
func (r RunnerSpec) RerunsInterrupted() bool { return r.Retry != RetryNever }

// Weekdays in the order the configuration names them.
var dayNames = map[string]time.Weekday{
	"sunday": time.Sunday, "monday": time.Monday, "tuesday": time.Tuesday,
	"wednesday": time.Wednesday, "thursday": time.Thursday, "friday": time.Friday,
	"saturday": time.Saturday,
}

// ParseWeekday maps a lower-case English day name to its weekday.
func ParseWeekday(name string) (time.Weekday, bool) {
	d, ok := dayNames[name]
	return d, ok
}

// Window is a local time-of-day interval [Start, End) in minutes after
// midnight. End may be 1440 ("24:00"). When Start > End the window wraps
// midnight and belongs to the day it starts on.
type Window struct {
	Start int
	End   int
}

// Wraps reports whether the window crosses midnight.
func (w Window) Wraps() bool { return w.Start > w.End }

// Match restricts a schedule entry to some days and/or a time window. Empty
// Days means every day; a nil Window means the whole day.
type Match struct {
	Days   []time.Weekday
	Window *Window
}

// ScheduleEntry is one element of a pool's `schedule:` list. An entry
// without Match is the pool's default.
type ScheduleEntry struct {
	Name    string
	Match   *Match
	Hot     int
	Stopped int
}

// Target is how many instances of each kind a pool should hold.
type Target struct {
	Hot     int `json:"hot"`
	Stopped int `json:"stopped"`
}

// Pool is one entry of the configuration's `pools:` map.
type Pool struct {
	Name        string
	Environment string
	Runner      string
	Timezone    string         // IANA name; "" means UTC
	Location    *time.Location // resolved Timezone
	Schedule    []ScheduleEntry

	// bullpen's own settings.
	HotIdleLifetime    time.Duration // a hot instance idle this long is replaced
	Reuse              bool          // return instances to the resource pool after a job
	MaxJobsPerInstance int           // 0 = unlimited (only with Reuse)
	MaxAge             time.Duration // 0 = unlimited (only with Reuse)
	// Autoscale, when set, lets the pool's hot target follow job demand
	// (the demand autoscaler's algorithm), never below the schedule's hot value.
	Autoscale *AutoscaleSpec
}

// AutoscaleSpec is a pool's `autoscale:` block: the demand autoscaler's parameters
// (internal/autoscale.Params holds the same, with the decision function).
type AutoscaleSpec struct {
	Min, Max                               int
	RunnersPerInstance                     int
	PollInterval                           time.Duration
	ScaleUpThreshold, ScaleDownThreshold   float64
	ScaleUpCooldown, ScaleDownCooldown     time.Duration
	ScaleUpStep, ScaleDownStep             int
	ScaleUpProportion, ScaleDownProportion float64
	StabilizationWindow, DecayHalfLife     time.Duration
	BreachThreshold                        float64
}

// Default pool settings.
const (
	DefaultHotIdleLifetime = 10 * time.Minute
)

// SpecHash fingerprints what a pool's machines are launched with: the
// runner spec, the image it resolved to, and the pool's name (a tag of each
// machine). Editing anything else must not roll a pool: schedules and
// timezones only change counts; a runner's retry only what the control
// plane does after an interruption; the environment only which control
// plane serves the pool; and the idle lifetime, reuse and its limits only
// how long a machine is kept and whether it takes another job, which the
// control plane decides for the machines it has.
func SpecHash(r RunnerSpec, imageID string, p Pool) string {
	r.Retry = ""
	doc := struct {
		Runner  RunnerSpec `json:"runner"`
		ImageID string     `json:"image_id"`
		Pool    string     `json:"pool"`
	}{r, imageID, p.Name}
	b, err := json.Marshal(doc)
	if err != nil {
		panic("spec hash: " + err.Error()) // plain structs always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// PoolStatus is what the converger last observed and decided for a pool,
// persisted so that status pages and other replicas can read it.
type PoolStatus struct {
	Name      string         `json:"name"`
	Schedule  string         `json:"schedule"`
	Target    Target         `json:"target"`
	SpecHash  string         `json:"spec_hash"`
	Counts    map[string]int `json:"counts"` // by "role/state", e.g. "hot/ready"
	LastCycle time.Time      `json:"last_cycle"`
	LastError string         `json:"last_error,omitempty"`
}

// For returns the count for role; zero for roles pools do not keep.
func (t Target) For(r Role) int {
	switch r {
	case RoleHot:
		return t.Hot
	case RoleStopped:
		return t.Stopped
	}
	return 0
}

// NewID returns a random identifier with the given prefix, e.g. "bp-3f9a…".
func NewID(prefix string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on supported platforms
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

// NewSecret returns a random credential of 32 bytes, hex encoded.
func NewSecret() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// ValidSecret reports whether s has NewSecret's form: 64 lowercase hex
// digits, so 256 bits when drawn at random.
func ValidSecret(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// HashSecret is how credentials are stored: SHA-256, hex encoded. The
// secrets are random, so no salt or stretching is needed.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// MachineSecret is the bootstrap secret of one machine of a launch: an
// HMAC of its cloud id under the launch's secret. A provider that launches
// machines one by one gives each only its own machine secret, so a machine
// cannot introduce itself as a sibling; a provider whose machines share
// launch data gives them the launch secret, and each agent derives its own
// (then only a proof the provider signs, such as EC2's identity document,
// tells siblings apart). The control plane stores only its hash, set when
// the machine's cloud id is recorded.
func MachineSecret(launchSecret, cloudID string) string {
	mac := hmac.New(sha256.New, []byte(launchSecret))
	mac.Write([]byte("bullpen machine\x00" + cloudID))
	return hex.EncodeToString(mac.Sum(nil))
}
