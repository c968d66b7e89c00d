package app_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/reaper"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

// startWith builds the app with o, as serve does, and closes it at the end.
func startWith(t *testing.T, o app.Options) error {
	t.Helper()
	cfg, err := config.Parse("runs-on.yml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	o.Config, o.StorePath, o.WebhookSecret, o.AdminToken = cfg, sqlitetest.Path(t), "secret", "token"
	o.Clock, o.Log = clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)), slog.New(slog.DiscardHandler)
	a, err := app.New(context.Background(), o)
	if err == nil {
		a.Close()
	}
	return err
}

// Agent settings given to a provider are checked at start, naming each that
// cannot work, so that serve stops there: every machine's agent refused
// them before, seen only in that machine's log, while the pools launched
// more.
func TestAgentSettingsThatCannotWorkStopTheStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    app.Options
		want []string
	}{
		{"local: a duration without a unit and a misspelt name", app.Options{Cloud: "local", LocalAgentEnv: map[string]string{
			"BULLPEN_AGENT_HEARTBEAT_INTERVAL": "5", "BULLPEN_AGENT_RUNER_COMMAND": "x {jitconfig}"}},
			[]string{"--local-agent-env", "BULLPEN_AGENT_HEARTBEAT_INTERVAL", "did you mean BULLPEN_AGENT_RUNNER_COMMAND?"}},
		{"local: heartbeats too rare for --silent-after", app.Options{Cloud: "local", Reaper: reaper.Options{SilentAfter: 3 * time.Second},
			LocalAgentEnv: map[string]string{"BULLPEN_AGENT_HEARTBEAT_INTERVAL": "2s"}},
			[]string{"--local-agent-env", "BULLPEN_AGENT_HEARTBEAT_INTERVAL: 2s is more than a third of the 3s"}},
		{"local: the machine's own state directory", app.Options{Cloud: "local", LocalAgentEnv: map[string]string{
			"BULLPEN_AGENT_STATE_DIR": "/tmp/shared"}},
			[]string{"--local-agent-env", "BULLPEN_AGENT_STATE_DIR"}},
		{"aws: a runner command without {jitconfig}", app.Options{Cloud: "aws", AWS: app.AWS{Region: "eu-west-1", Subnets: []string{"subnet-1"},
			AgentEnv: map[string]string{"BULLPEN_AGENT_RUNNER_COMMAND": "sudo -u runner ./run.sh"}}},
			[]string{"--aws-agent-env", "BULLPEN_AGENT_RUNNER_COMMAND", "{jitconfig}"}},
		{"aws: settings the launch data writes", app.Options{Cloud: "aws", AWS: app.AWS{Region: "eu-west-1", Subnets: []string{"subnet-1"},
			AgentEnv: map[string]string{"BULLPEN_AGENT_STATE_DIR": "/data/bullpen", "BULLPEN_AGENT_CLOUD_ID_FROM": "digitalocean"}}},
			[]string{"--aws-agent-env", "BULLPEN_AGENT_STATE_DIR", "BULLPEN_AGENT_CLOUD_ID_FROM"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.o.Cloud == "local" {
				tc.o.LocalDir = t.TempDir()
			}
			err := startWith(t, tc.o)
			if !errors.Is(err, agent.ErrBadSettings) {
				t.Fatalf("error %v, want agent.ErrBadSettings", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// Settings that work start the app, with the local provider's own default
// shutdown command replaced as before.
func TestWorkableAgentSettingsStart(t *testing.T) {
	err := startWith(t, app.Options{Cloud: "local", LocalDir: t.TempDir(), Reaper: reaper.Options{SilentAfter: 3 * time.Second},
		LocalAgentEnv: map[string]string{"BULLPEN_AGENT_RUNNER_COMMAND": "./fake-runner.sh {jitconfig}",
			"BULLPEN_AGENT_HEARTBEAT_INTERVAL": "500ms", "BULLPEN_AGENT_POLL_WAIT": "2s", "BULLPEN_AGENT_SHUTDOWN_COMMAND": "exit 0"}})
	if err != nil {
		t.Fatal(err)
	}
}
