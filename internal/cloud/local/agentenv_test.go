package local

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/launchdata"
)

// Settings no machine's launch data can take are refused when the Cloud is
// made, each named: the settings the Cloud writes for each machine were
// replaced without a word, and the others failed every launch.
func TestAgentSettingsNoLaunchDataCanTakeAreRefusedAtOnce(t *testing.T) {
	for name, k := range map[string]string{
		"the machine's cloud id":        launchdata.EnvCloudID,
		"the machine's state directory": launchdata.EnvStateDir,
		"the launch's own setting":      launchdata.EnvURL,
		"a name no shell takes":         "NOT A NAME",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := New(Options{Dir: t.TempDir(), Log: slog.New(slog.DiscardHandler),
				AgentEnv: map[string]string{k: "x", "BULLPEN_AGENT_WORK_DIR": "/srv/runner"}})
			if err == nil {
				c.Close()
				t.Fatalf("a Cloud was made with %s", k)
			}
			if !strings.Contains(err.Error(), k) {
				t.Fatalf("error %q does not name %s", err, k)
			}
		})
	}
}
