package launchdata

import (
	"fmt"
	"maps"
	"path"
	"strconv"
	"strings"
	"text/template"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Markers around the part of the script that holds the credential.
const (
	SettingsBegin = "# --- agent settings (the only part holding a credential) ---"
	SettingsEnd   = "# --- end of agent settings ---"
)

// CloudInit renders the bash user-data script for EC2 and DigitalOcean
// machines. Every value in it is single-quoted (the file contents are
// written with printf, never a here-document whose end marker a value could
// forge), so no value can break out into the script.
func CloudInit(b domain.AgentBootstrap, o CloudInitOptions) (string, error) {
	if err := o.Check(); err != nil {
		return "", err
	}
	_ = o.normalize() // checked above: this fills in the defaults
	extra := maps.Clone(o.Extra)
	if extra == nil {
		extra = map[string]string{}
	}
	extra[EnvStateDir] = o.StateDir
	extra[EnvCloudIDFrom] = o.CloudIDFrom
	unitPath := path.Join(o.UnitDir, UnitName)
	stoppedPath := o.stoppedPath()
	// The user data is every machine's of a launch: it holds the launch's
	// secret, and each agent derives its own machine's.
	env, err := envFile(b, EnvLaunchSecret, extra)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	err = script.Execute(&sb, map[string]string{
		"EnvDir":      shellQuote(path.Dir(o.EnvPath)),
		"EnvPath":     shellQuote(o.EnvPath),
		"EnvFile":     shellQuote(env),
		"Bin":         shellQuote(o.InstallPath),
		"URL":         quoteIfSet(o.AgentURL),
		"SHA256":      shellQuote(o.AgentSHA256),
		"UnitPath":    shellQuote(unitPath),
		"Unit":        shellQuote(unit(o)),
		"StoppedPath": shellQuote(stoppedPath),
		"Stopped":     shellQuote(stoppedScript(o)),
		"UnitName":    shellQuote(UnitName),
		"Begin":       SettingsBegin,
		"End":         SettingsEnd,
	})
	if err != nil {
		return "", err
	}
	return sb.String(), nil
}

// Exit statuses of `bullpen agent` that its unit does not restart: no
// start mends them. Settings that cannot work exit 78, EX_CONFIG of
// sysexits.h, rather than 2, which is also how a Go program ends after a
// panic or a fatal runtime error: a crash is restarted like any other
// failure, where a final 2 would cost the machine its pool place or its
// job.
const (
	AgentExitUnauthorized = 3  // credentials refused
	AgentExitShutdown     = 4  // the agent ran the shutdown command itself
	AgentExitSettings     = 78 // settings that cannot work
)

// unit is the systemd service. The agent's final statuses are not
// restarted. After AgentExitSettings and AgentExitUnauthorized the machine
// would be left running with no agent, billed for nothing and never
// reporting, so the unit's stop shuts it down (stoppedScript). Any other
// failure, a crash or a config file that could not be read among them, is
// restarted.
func unit(o CloudInitOptions) string {
	return `[Unit]
Description=bullpen agent
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=` + o.InstallPath + ` agent --config ` + o.EnvPath + `
ExecStopPost=` + o.stoppedPath() + `
Restart=on-failure
RestartSec=5
RestartPreventExitStatus=` + fmt.Sprintf("%d %d %d", AgentExitUnauthorized, AgentExitShutdown, AgentExitSettings) + `
KillMode=mixed
TimeoutStopSec=30

[Install]
WantedBy=multi-user.target
`
}

// defaultShutdownCommand is the agent's own default shutdown command
// (agent.DefaultShutdownCommand).
const defaultShutdownCommand = "shutdown -h now"

// StoppedName is the program, beside the agent's binary, that the unit runs
// each time the agent stops (systemd's ExecStopPost).
const StoppedName = "bullpen-agent-stopped"

func (o CloudInitOptions) stoppedPath() string {
	return path.Join(path.Dir(o.InstallPath), StoppedName)
}

// stoppedScript shuts the machine down when the agent exited with a status
// the unit does not restart and after which the agent did not shut the
// machine down itself: AgentExitUnauthorized and AgentExitSettings. It runs
// the agent's shutdown command as the env file sets it (the default when
// the file does not say, or cannot be read: its settings may be what
// failed) with /bin/sh -c, as the agent does. systemd gives it how the
// agent ended in EXIT_CODE and EXIT_STATUS.
func stoppedScript(o CloudInitOptions) string {
	final := fmt.Sprintf("%d | %d", AgentExitUnauthorized, AgentExitSettings)
	return `#!/bin/sh
# bullpen: run by systemd each time the agent stops. After exit status ` + strconv.Itoa(AgentExitUnauthorized) + `
# (credentials refused) or ` + strconv.Itoa(AgentExitSettings) + ` (settings that cannot work) the agent is not
# restarted: the machine is shut down rather than left running without one.
# Any other status, a crash's 2 among them, is restarted and left alone here.
[ "${EXIT_CODE:-}" = exited ] || exit 0
case "${EXIT_STATUS:-}" in
` + final + `) ;;
*) exit 0 ;;
esac
# The agent's settings file, written by the launch data.
# shellcheck source=/dev/null
shutdown_command=$(. ` + shellQuote(o.EnvPath) + ` >/dev/null 2>&1 && printf '%s' "${BULLPEN_AGENT_SHUTDOWN_COMMAND:-}")
echo "bullpen: the agent exited with status $EXIT_STATUS, which no restart mends; shutting the machine down" >&2
exec /bin/sh -c "${shutdown_command:-` + defaultShutdownCommand + `}"
`
}

// script is the user data. Every value is already shell-quoted.
var script = template.Must(template.New("cloud-init").Parse(`#!/bin/bash
# bullpen launch data: installs and starts the bullpen agent.
set -euo pipefail
umask 077

{{.Begin}}
env_path={{.EnvPath}}
mkdir -p {{.EnvDir}}
chmod 0700 {{.EnvDir}}
printf '%s' {{.EnvFile}} > "$env_path.tmp"
chown root:root "$env_path.tmp"
chmod 0600 "$env_path.tmp"
mv -f "$env_path.tmp" "$env_path"
{{.End}}

{{if .URL}}# The agent binary, refused unless its checksum matches.
command -v curl >/dev/null || { echo "bullpen: curl is required" >&2; exit 1; }
download="$(mktemp)"
trap 'rm -f "$download"' EXIT
curl -fsSL --retry 10 --retry-delay 3 --retry-connrefused -o "$download" {{.URL}}
if ! printf '%s  %s\n' {{.SHA256}} "$download" | sha256sum --check --status; then
  echo "bullpen: the agent binary's checksum does not match; not installing it" >&2
  exit 1
fi
mkdir -p "$(dirname {{.Bin}})"
install -m 0755 "$download" {{.Bin}}
{{else}}# The agent binary is baked into the image.
[ -x {{.Bin}} ] || { echo "bullpen: no agent binary at "{{.Bin}} >&2; exit 1; }
{{end}}
# What the service runs when the agent stops.
stopped_path={{.StoppedPath}}
mkdir -p "$(dirname "$stopped_path")"
# The script is written as it is: its expansions happen when it runs.
# shellcheck disable=SC2016
printf '%s' {{.Stopped}} > "$stopped_path"
chmod 0755 "$stopped_path"
# The agent runs as a service, restarted if it fails.
unit_path={{.UnitPath}}
mkdir -p "$(dirname "$unit_path")"
printf '%s' {{.Unit}} > "$unit_path"
chmod 0644 "$unit_path"
systemctl daemon-reload
systemctl enable --now {{.UnitName}}
`))

// quoteIfSet quotes s, or leaves it empty for the script to test.
func quoteIfSet(s string) string {
	if s == "" {
		return ""
	}
	return shellQuote(s)
}
