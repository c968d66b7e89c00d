package agent_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launchdata"
)

// launchDataFile writes the agent's launch data as launchdata renders it,
// with secret under key (EnvBootstrap or EnvLaunchSecret).
func (r *rig) launchDataFile(id, key, secret string) string {
	r.t.Helper()
	cfg := r.config(id, "")
	text, err := launchdata.EnvFile(domain.AgentBootstrap{URL: cfg.URL, LaunchID: cfg.LaunchID, Secret: secret},
		map[string]string{
			launchdata.EnvCloudID: cfg.CloudID, launchdata.EnvStateDir: cfg.StateDir,
			"BULLPEN_AGENT_RUNNER_COMMAND": cfg.RunnerCommand, "BULLPEN_AGENT_SHUTDOWN_COMMAND": cfg.ShutdownCommand,
		})
	if err != nil {
		r.t.Fatal(err)
	}
	if key != launchdata.EnvBootstrap {
		text = strings.Replace(text, launchdata.EnvBootstrap+"=", key+"=", 1)
	}
	file := filepath.Join(r.dir, "agent-"+id+".env")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		r.t.Fatal(err)
	}
	return file
}

// The launch data says which secret the machine holds: its own, presented
// as is, or the launch's, from which the agent derives its own with its
// cloud id. The row accepts only the machine's own secret: the launch's
// presented as the machine's is refused. No secret reaches the logs.
func TestTheLaunchDataSaysWhichSecretTheAgentHolds(t *testing.T) {
	launch := domain.NewSecret()
	for _, tc := range []struct {
		name, key string
		secret    func(cloudID string) string
		refused   bool
	}{
		{"the machine's own secret", launchdata.EnvBootstrap,
			func(cloudID string) string { return domain.MachineSecret(launch, cloudID) }, false},
		{"the launch's secret", launchdata.EnvLaunchSecret, func(string) string { return launch }, false},
		{"the launch's secret given as the machine's", launchdata.EnvBootstrap, func(string) string { return launch }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			in := r.cp.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateBooting, LaunchID: "lt-bp-1",
				BootstrapHash: domain.HashSecret(domain.MachineSecret(launch, "i-bp-1"))})
			cfg, _, err := agent.LoadConfig([]string{"--config", r.launchDataFile(in.ID, tc.key, tc.secret(in.CloudID))},
				func(string) string { return "" }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			g := r.run(cfg)
			if tc.refused {
				if err := result(t, g); !errors.Is(err, agent.ErrUnauthorized) {
					t.Fatalf("the agent ended with %v, want refused credentials", err)
				}
				if r.cp.Get(in.ID).AgentTokenHash != "" {
					t.Fatal("the launch's secret got the machine's token")
				}
			} else {
				r.cp.Calls.Await(t, 1, func(c agentapitestCall) bool { return c.Op == "signal" && c.CloudID == in.CloudID })
				if r.cp.Get(in.ID).AgentTokenHash == "" {
					t.Fatal("the instance has no token")
				}
			}
			g.stop()
			for name, s := range map[string]string{"launch secret": launch, "machine secret": domain.MachineSecret(launch, in.CloudID)} {
				if strings.Contains(r.logs.String(), s) || strings.Contains(r.cp.Logs.String(), s) {
					t.Errorf("the %s is in the logs", name)
				}
			}
		})
	}
}

// Launch data holding both kinds of secret is a mistake the agent refuses
// to guess about; the error names the settings, never their values.
func TestBothSecretsAreRefused(t *testing.T) {
	_, _, err := agent.LoadConfig([]string{"--url", "http://cp:8080", "--cloud-id", "i-1",
		"--bootstrap", "machine-s3cret", "--launch-secret", "launch-s3cret"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "LAUNCH_SECRET") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v, want one naming both settings and no value", err)
	}
}
