package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launchdata"
)

// The machine's env file, written through launchdata, means to a shell
// what it means to the agent.
func TestEnvFileValuesSurviveAShell(t *testing.T) {
	values := map[string]string{
		"empty": "", "plain": "abc-DEF_1.2:3/4@5%6+7=8,9", "url": "https://cp.example:8443/x?y=1&z=2",
		"space": "with space", "single quote": "it's", "dollar": "$HOME", "backquote": "`id`",
		"backslash": `a\b`, "double quote": `say "hi"`, "non-ascii": "café", "leading dash": "-x",
		"line break": "a\nb",
	}
	dir := t.TempDir()
	for name, v := range values {
		t.Run(name, func(t *testing.T) {
			env, err := launchdata.EnvFile(domain.AgentBootstrap{}, map[string]string{"K": v})
			if err != nil {
				t.Fatalf("env file: %v", err)
			}
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if err := os.WriteFile(file, []byte(env), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := sourceEnv(t, file, "K")[0]; got != v {
				t.Errorf("the shell reads %q, want %q", got, v)
			}
		})
	}
}
