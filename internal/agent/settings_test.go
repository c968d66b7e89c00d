package agent_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
)

// Settings as serve's end-to-end tests give them pass.
func TestCheckSettingsPassesWorkableSettings(t *testing.T) {
	err := agent.CheckSettings(map[string]string{
		"BULLPEN_AGENT_RUNNER_COMMAND":     "/opt/fake-runner.sh {jitconfig}",
		"BULLPEN_AGENT_HEARTBEAT_INTERVAL": "500ms",
		"BULLPEN_AGENT_POLL_WAIT":          "2s",
		"BULLPEN_AGENT_WORK_DIR":           "/home/runner",
		"BULLPEN_AGENT_SHUTDOWN_COMMAND":   "true",
		"BULLPEN_AGENT_LOG_LEVEL":          "",
		"RUNNER_ALLOW_RUNASROOT":           "1",
	}, agent.SettingsLimits{SilentAfter: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.CheckSettings(nil, agent.SettingsLimits{}); err != nil {
		t.Fatalf("no settings: %v", err)
	}
}

// Every setting that would keep the agents from working is named, with
// why, and the value of a command never appears.
func TestCheckSettingsNamesWhatCannotWork(t *testing.T) {
	const secret = "tok3n-in-a-command"
	for _, tc := range []struct {
		name   string
		vars   map[string]string
		limits agent.SettingsLimits
		want   []string
	}{
		{"a duration without a unit", map[string]string{"BULLPEN_AGENT_HEARTBEAT_INTERVAL": "5"}, agent.SettingsLimits{},
			[]string{"BULLPEN_AGENT_HEARTBEAT_INTERVAL", "not a positive duration"}},
		{"a misspelt name", map[string]string{"BULLPEN_AGENT_RUNER_COMMAND": "x {jitconfig}"}, agent.SettingsLimits{},
			[]string{"BULLPEN_AGENT_RUNER_COMMAND: the agent has no such setting", "did you mean BULLPEN_AGENT_RUNNER_COMMAND?"}},
		{"a name in lower case", map[string]string{"bullpen_agent_poll_wait": "10s"}, agent.SettingsLimits{},
			[]string{"bullpen_agent_poll_wait", "did you mean BULLPEN_AGENT_POLL_WAIT?"}},
		{"a name far from any", map[string]string{"BULLPEN_AGENT_COLOUR": "blue"}, agent.SettingsLimits{},
			[]string{"BULLPEN_AGENT_COLOUR: the agent has no such setting", "bullpen agent -h"}},
		{"a runner command without the placeholder", map[string]string{"BULLPEN_AGENT_RUNNER_COMMAND": "./run.sh --token " + secret},
			agent.SettingsLimits{}, []string{"BULLPEN_AGENT_RUNNER_COMMAND", "{jitconfig}"}},
		{"a pattern that does not compile", map[string]string{"BULLPEN_AGENT_JOB_STARTED_PATTERN": "Running ("}, agent.SettingsLimits{},
			[]string{"BULLPEN_AGENT_JOB_STARTED_PATTERN", "not a regular expression"}},
		{"a bad log level", map[string]string{"BULLPEN_AGENT_LOG_LEVEL": "loud"}, agent.SettingsLimits{},
			[]string{"BULLPEN_AGENT_LOG_LEVEL"}},
		{"heartbeats too rare for the silence allowance", map[string]string{"BULLPEN_AGENT_HEARTBEAT_INTERVAL": "2m"},
			agent.SettingsLimits{SilentAfter: 3 * time.Minute}, []string{"BULLPEN_AGENT_HEARTBEAT_INTERVAL: 2m0s is more than a third of the 3m0s"}},
		{"the default heartbeat too rare", nil, agent.SettingsLimits{SilentAfter: 10 * time.Second},
			[]string{"BULLPEN_AGENT_HEARTBEAT_INTERVAL: 5s (the default) is more than a third"}},
		{"what the provider sets for each machine", map[string]string{"BULLPEN_AGENT_STATE_DIR": "/data", "BULLPEN_AGENT_CLOUD_ID_FROM": "digitalocean",
			"BULLPEN_AGENT_CLOUD_ID": "i-1", "BULLPEN_AGENT_URL": "http://cp", "BULLPEN_AGENT_LAUNCH_SECRET": secret}, agent.SettingsLimits{},
			[]string{"BULLPEN_AGENT_STATE_DIR: the provider sets it", "BULLPEN_AGENT_CLOUD_ID_FROM: the provider sets it",
				"BULLPEN_AGENT_CLOUD_ID: the provider sets it", "BULLPEN_AGENT_URL: the provider sets it", "BULLPEN_AGENT_LAUNCH_SECRET: the provider sets it"}},
		{"every problem at once", map[string]string{"BULLPEN_AGENT_POLL_WAIT": "soon", "BULLPEN_AGENT_WARMUP_COMAND": "make"}, agent.SettingsLimits{},
			[]string{"BULLPEN_AGENT_POLL_WAIT", "did you mean BULLPEN_AGENT_WARMUP_COMMAND?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := agent.CheckSettings(tc.vars, tc.limits)
			if !errors.Is(err, agent.ErrBadSettings) {
				t.Fatalf("error %v, want ErrBadSettings", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q repeats a value", err)
			}
		})
	}
}

// The agent itself refuses a runner command that could never get a job's
// configuration, as CheckSettings does.
func TestLoadConfigRefusesARunnerCommandWithoutThePlaceholder(t *testing.T) {
	_, _, err := agent.LoadConfig([]string{"--url", "http://cp:8080", "--cloud-id", "i-1", "--runner-command", "./run.sh"},
		func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "{jitconfig}") {
		t.Fatalf("error %v, want one naming the placeholder", err)
	}
}

// A config file that cannot be read is told from one whose settings cannot
// work: the first may be mended by the machine, the second never.
func TestLoadConfigTellsAnUnreadableFileFromBadSettings(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--url", "http://cp:8080", "--cloud-id", "i-1", "--config"}
	_, _, err := agent.LoadConfig(append(base, filepath.Join(dir, "missing.env")), func(string) string { return "" }, io.Discard)
	if !errors.Is(err, agent.ErrConfigUnreadable) {
		t.Fatalf("missing file: %v, want ErrConfigUnreadable", err)
	}
	bad := filepath.Join(dir, "agent.env")
	if err := os.WriteFile(bad, []byte("BULLPEN_AGENT_POLL_WAIT=soon\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = agent.LoadConfig(append(base, bad), func(string) string { return "" }, io.Discard)
	if err == nil || errors.Is(err, agent.ErrConfigUnreadable) {
		t.Fatalf("bad setting: %v, want an error that is not ErrConfigUnreadable", err)
	}
}
