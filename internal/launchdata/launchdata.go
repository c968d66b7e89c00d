// Package launchdata renders what a provider puts in a machine's launch
// data so that its agent can find the control plane: the agent's
// environment file (BULLPEN_AGENT_* settings, including one bootstrap
// secret), and for cloud machines a bash user-data script that writes that
// file, installs the bullpen binary after checking its checksum (or finds
// it in the image), and runs `bullpen agent` as a systemd service. It is
// the one renderer of that file: every provider writes through it, and the
// agent's parser reads exactly what it writes.
//
// Which secret the file holds depends on how the provider launches: a
// provider that writes each machine its own launch data gives EnvFile that
// machine's own secret (domain.MachineSecret), written as EnvBootstrap;
// CloudInit, whose user data every machine of a fleet shares, writes the
// launch's secret as EnvLaunchSecret, and each agent derives its own.
package launchdata

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Names of the agent's settings written here; the agent reads them (see
// internal/agent's EnvNames).
const (
	EnvURL          = "BULLPEN_AGENT_URL"
	EnvLaunchID     = "BULLPEN_AGENT_LAUNCH_ID"
	EnvBootstrap    = "BULLPEN_AGENT_BOOTSTRAP"     // the machine's own bootstrap secret
	EnvLaunchSecret = "BULLPEN_AGENT_LAUNCH_SECRET" // a launch's secret, shared by its machines
	EnvCloudID      = "BULLPEN_AGENT_CLOUD_ID"
	EnvCloudIDFrom  = "BULLPEN_AGENT_CLOUD_ID_FROM"
	EnvStateDir     = "BULLPEN_AGENT_STATE_DIR"
)

// EnvFile renders the agent's environment file for one machine: the
// bootstrap's settings, b.Secret being that machine's own bootstrap secret
// (never the launch's), then extra's in name order. Every value is single-quoted, so the file
// means the same to `bullpen agent --config` and to a shell that sources
// it, whatever the values hold. An extra name that is not a shell name, or
// that would override the bootstrap's settings, and a value holding a NUL
// byte (which no shell string can hold) are refused; the error names the
// setting, never its value (it may be a credential).
func EnvFile(b domain.AgentBootstrap, extra map[string]string) (string, error) {
	return envFile(b, EnvBootstrap, extra)
}

// envFile is EnvFile with the bootstrap secret under secretKey: a machine's
// own secret (EnvBootstrap), or a launch's shared one (EnvLaunchSecret), from
// which the agent derives its machine's.
func envFile(b domain.AgentBootstrap, secretKey string, extra map[string]string) (string, error) {
	var sb strings.Builder
	sb.WriteString("# bullpen agent settings, written by the launch data.\n")
	sb.WriteString("# This file holds a credential (a bootstrap secret): keep it 0600.\n")
	var errs []error
	line := func(k, v string) {
		if strings.ContainsRune(v, 0) {
			errs = append(errs, fmt.Errorf("agent setting %s: the value holds a NUL byte", k))
		}
		sb.WriteString(k + "=" + shellQuote(v) + "\n")
	}
	line(EnvURL, b.URL)
	line(EnvLaunchID, b.LaunchID)
	line(secretKey, b.Secret)
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if err := checkSetting(k); err != nil {
			errs = append(errs, err)
		} else {
			line(k, extra[k])
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return sb.String(), nil
}

// shellQuote quotes s as one shell word: inside single quotes nothing is
// special but the single quote itself, which is closed, escaped, reopened.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func validName(k string) bool { return nameRE.MatchString(k) }

// checkSetting says why k cannot be an extra agent setting, or nil.
func checkSetting(k string) error {
	switch {
	case !validName(k):
		return fmt.Errorf("agent setting %q: not a shell variable name", k)
	case k == EnvURL || k == EnvLaunchID || k == EnvBootstrap || k == EnvLaunchSecret:
		return fmt.Errorf("agent setting %s: set by the launch itself", k)
	}
	return nil
}

// CloudInitOptions shape the user-data script. Paths must be absolute and
// plain (letters, digits, . _ - /): they also appear in the systemd unit.
type CloudInitOptions struct {
	// AgentURL is where the bullpen binary is downloaded from (http or
	// https), checked against AgentSHA256; empty when it is baked into the
	// image at InstallPath.
	AgentURL    string
	AgentSHA256 string // the binary's SHA-256, hex: the script refuses any other
	// CloudIDFrom is where the agent reads the machine's cloud id:
	// "imds" (EC2, the default) or "digitalocean".
	CloudIDFrom string
	InstallPath string            // default /usr/local/bin/bullpen
	EnvPath     string            // default /etc/bullpen/agent.env
	StateDir    string            // default /var/lib/bullpen-agent
	UnitDir     string            // default /etc/systemd/system
	Extra       map[string]string // more settings (BULLPEN_AGENT_WORK_DIR, RUNNER_ALLOW_RUNASROOT, …)
}

// Defaults of CloudInitOptions.
const (
	DefaultInstallPath = "/usr/local/bin/bullpen"
	DefaultEnvPath     = "/etc/bullpen/agent.env"
	DefaultStateDir    = "/var/lib/bullpen-agent"
	DefaultUnitDir     = "/etc/systemd/system"
	// UnitName is the systemd service that runs the agent.
	UnitName = "bullpen-agent.service"
)

var (
	plainPath = regexp.MustCompile(`^/[A-Za-z0-9._/-]*$`)
	sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Check says what is wrong with the options (extra settings included),
// before any launch renders them.
func (o CloudInitOptions) Check() error {
	errs := []error{o.normalize()}
	for _, k := range slices.Sorted(maps.Keys(o.Extra)) {
		errs = append(errs, checkSetting(k), checkCloudInitSetting(k))
	}
	return errors.Join(errs...)
}

// checkCloudInitSetting refuses an extra setting that CloudInit writes
// itself, rather than let one replace the other unseen: each machine reads
// its own cloud id from the metadata service, which CloudIDFrom names, and
// the state directory is StateDir.
func checkCloudInitSetting(k string) error {
	switch k {
	case EnvCloudID, EnvCloudIDFrom:
		return fmt.Errorf("agent setting %s: each machine reads its own cloud id from the metadata service (the cloud id source option)", k)
	case EnvStateDir:
		return fmt.Errorf("agent setting %s: set by the launch data (the state dir option)", k)
	}
	return nil
}

func (o *CloudInitOptions) normalize() error {
	o.InstallPath = cmp.Or(o.InstallPath, DefaultInstallPath)
	o.EnvPath = cmp.Or(o.EnvPath, DefaultEnvPath)
	o.StateDir = cmp.Or(o.StateDir, DefaultStateDir)
	o.UnitDir = cmp.Or(o.UnitDir, DefaultUnitDir)
	o.CloudIDFrom = cmp.Or(o.CloudIDFrom, "imds")
	o.AgentSHA256 = strings.ToLower(strings.TrimSpace(o.AgentSHA256))
	for name, p := range map[string]string{"install path": o.InstallPath, "env path": o.EnvPath,
		"state dir": o.StateDir, "unit dir": o.UnitDir} {
		if !plainPath.MatchString(p) || strings.Contains(p, "..") {
			return fmt.Errorf("launch data: %s %q: want an absolute path of letters, digits, . _ - /", name, p)
		}
	}
	u, err := url.Parse(o.AgentURL)
	switch {
	case o.AgentURL == "":
		if o.AgentSHA256 != "" {
			return errors.New("launch data: an agent binary checksum without a URL to download it from")
		}
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.ContainsAny(o.AgentURL, " \t\r\n"):
		return fmt.Errorf("launch data: agent binary URL %q: want http(s)://host/path", o.AgentURL)
	case o.AgentURL != "" && !sha256Hex.MatchString(o.AgentSHA256):
		return errors.New("launch data: the agent binary's SHA-256 must be 64 hex digits")
	case o.CloudIDFrom != "imds" && o.CloudIDFrom != "digitalocean":
		return fmt.Errorf("launch data: cloud id source %q: want imds or digitalocean", o.CloudIDFrom)
	}
	return nil
}
