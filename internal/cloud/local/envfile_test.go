package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestEnvFileValuesSurviveAShell(t *testing.T) {
	values := []struct {
		name, value, line string
	}{
		{"empty", "", "K="},
		{"plain", "abc-DEF_1.2:3/4@5%6+7=8,9", "K=abc-DEF_1.2:3/4@5%6+7=8,9"},
		{"url", "https://cp.example:8443/x?y=1&z=2", "K='https://cp.example:8443/x?y=1&z=2'"},
		{"space", "with space", "K='with space'"},
		{"single quote", "it's", `K='it'\''s'`},
		{"dollar", "$HOME", "K='$HOME'"},
		{"backquote", "`id`", "K='`id`'"},
		{"backslash", `a\b`, `K='a\b'`},
		{"double quote", `say "hi"`, `K='say "hi"'`},
		{"non-ascii", "café", "K='café'"},
		{"leading dash", "-x", "K=-x"},
	}
	dir := t.TempDir()
	for _, v := range values {
		t.Run(v.name, func(t *testing.T) {
			env, err := renderEnv(domain.AgentBootstrap{}, map[string]string{"K": v.value})
			if err != nil {
				t.Fatalf("renderEnv: %v", err)
			}
			lines := strings.Split(strings.TrimSuffix(env, "\n"), "\n")
			if got := lines[len(lines)-1]; got != v.line {
				t.Errorf("line %q, want %q", got, v.line)
			}
			file := filepath.Join(dir, strings.ReplaceAll(v.name, " ", "-"))
			if err := os.WriteFile(file, []byte(env), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := sourceEnv(t, file, "K")[0]; got != v.value {
				t.Errorf("the shell reads %q, want %q", got, v.value)
			}
		})
	}
}

func TestEnvFileOrderAndRefusals(t *testing.T) {
	env, err := renderEnv(domain.AgentBootstrap{URL: "u", LaunchID: "l", Secret: "s"},
		map[string]string{EnvStateDir: "d", EnvCloudID: "c"})
	if err != nil {
		t.Fatalf("renderEnv: %v", err)
	}
	want := "BULLPEN_AGENT_URL=u\nBULLPEN_AGENT_LAUNCH_ID=l\nBULLPEN_AGENT_BOOTSTRAP=s\n" +
		"BULLPEN_AGENT_CLOUD_ID=c\nBULLPEN_AGENT_STATE_DIR=d\n"
	if env != want {
		t.Errorf("env file:\n%s\nwant:\n%s", env, want)
	}
	for _, bad := range []string{"a\nb", "a\rb", "a\x00b"} {
		_, err := renderEnv(domain.AgentBootstrap{Secret: bad}, nil)
		if err == nil || strings.Contains(err.Error(), bad) {
			t.Errorf("renderEnv with %q: %v, want a refusal naming only the key", bad, err)
		}
	}
}
