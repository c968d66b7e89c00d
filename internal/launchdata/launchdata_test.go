package launchdata_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launchdata"
)

// oddValues are values that would break out of careless quoting.
var oddValues = map[string]string{
	"single quote":   `it's`,
	"quote escape":   `'\''`,
	"double quotes":  `say "hi"`,
	"command":        `$(touch PWNED)`,
	"backticks":      "`touch PWNED`",
	"semicolon":      `x'; touch PWNED; echo '`,
	"newline":        "one\ntwo\n# comment\nBULLPEN_AGENT_URL=evil",
	"heredoc marker": "x\nEOF\ntouch PWNED\nEOF",
	"backslashes":    `a\b\\c\`,
	"dollar":         `$HOME ${PATH} $1`,
	"unicode":        "héllo ✓",
	"blanks":         " \t lead and trail \t ",
	"empty":          "",
}

func bootstrap(secret string) domain.AgentBootstrap {
	return domain.AgentBootstrap{URL: "https://cp.example:8443", LaunchID: "lt-0a1b", Secret: secret}
}

func TestEnvFile(t *testing.T) {
	got := envFile(t, bootstrap("s3cret"), map[string]string{
		"BULLPEN_AGENT_STATE_DIR": "/var/lib/x", "A_SETTING": "it's",
	})
	want := `# bullpen agent settings, written by the launch data.
# This file holds a credential (a bootstrap secret): keep it 0600.
BULLPEN_AGENT_URL='https://cp.example:8443'
BULLPEN_AGENT_LAUNCH_ID='lt-0a1b'
BULLPEN_AGENT_BOOTSTRAP='s3cret'
A_SETTING='it'\''s'
BULLPEN_AGENT_STATE_DIR='/var/lib/x'
`
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

// Every odd value comes back exactly, both through the agent's parser and
// through a shell sourcing the file, and nothing in it runs.
func TestEnvFileValuesSurviveQuoting(t *testing.T) {
	dir := t.TempDir()
	for name, v := range oddValues {
		t.Run(name, func(t *testing.T) {
			text := envFile(t, bootstrap(v), map[string]string{"ODD": v, "BULLPEN_AGENT_WORK_DIR": v})
			vars, err := agent.ParseEnvFile(text)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"BULLPEN_AGENT_BOOTSTRAP", "ODD", "BULLPEN_AGENT_WORK_DIR"} {
				if vars[k] != v {
					t.Fatalf("agent read %s = %q, want %q", k, vars[k], v)
				}
			}
			if vars["BULLPEN_AGENT_URL"] != "https://cp.example:8443" {
				t.Fatalf("the URL became %q", vars["BULLPEN_AGENT_URL"])
			}
			file := filepath.Join(dir, "agent.env")
			if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", "-c", `. "$1" && printf '%s' "$ODD"`, "sh", file)
			cmd.Dir = dir
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("sourcing: %v", err)
			}
			if string(out) != v {
				t.Fatalf("sh read %q, want %q", out, v)
			}
			if _, err := os.Stat(filepath.Join(dir, "PWNED")); err == nil {
				t.Fatal("a value ran a command")
			}
		})
	}
}

// envFile is launchdata.EnvFile for settings that must be accepted.
func envFile(t *testing.T, b domain.AgentBootstrap, extra map[string]string) string {
	t.Helper()
	text, err := launchdata.EnvFile(b, extra)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// What a shell cannot carry, or what would let a setting replace the
// launch's own, is refused, naming the setting but never the value.
func TestEnvFileRefuses(t *testing.T) {
	for name, extra := range map[string]map[string]string{
		"a name no shell takes":     {"not a name": "x"},
		"a name starting a number":  {"1BAD": "x"},
		"the launch's own settings": {"BULLPEN_AGENT_URL": "https://evil"},
		"a NUL byte":                {"ODD": "se\x00cret"},
	} {
		if _, err := launchdata.EnvFile(bootstrap("s3cret"), extra); err == nil || strings.Contains(err.Error(), "cret") {
			t.Errorf("%s: %v, want a refusal that names the setting only", name, err)
		}
	}
}

// requireShellcheck returns shellcheck's path, or skips when it is absent
// and BULLPEN_REQUIRE_SHELLCHECK is unset.
func requireShellcheck(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("shellcheck")
	if err == nil {
		return path
	}
	if os.Getenv("BULLPEN_REQUIRE_SHELLCHECK") != "" {
		t.Fatal("shellcheck is not installed, and BULLPEN_REQUIRE_SHELLCHECK is set")
	}
	t.Skip("shellcheck is not installed (apt-get install -y shellcheck); set BULLPEN_REQUIRE_SHELLCHECK=1 to fail instead")
	return ""
}

func shellcheck(t *testing.T, shell, text string, args ...string) {
	t.Helper()
	bin := requireShellcheck(t)
	file := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, append([]string{"--shell=" + shell, "--severity=style"}, append(args, file)...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("shellcheck: %v\n%s\nscript:\n%s", err, out, text)
	}
}

func options() launchdata.CloudInitOptions {
	return launchdata.CloudInitOptions{
		AgentURL:    "https://downloads.example/bullpen/v1/bullpen-linux-amd64",
		AgentSHA256: strings.Repeat("ab", 32),
	}
}

// literalNotes are shellcheck's notes (severity info) that a single-quoted
// value holds $, backticks or backslashes that will not be expanded: for
// values written on purpose as literals, that is the point.
const literalNotes = "--exclude=SC2016,SC1003"

func TestScriptsPassShellcheck(t *testing.T) {
	requireShellcheck(t)
	for _, source := range []string{"imds", "digitalocean"} {
		o := options()
		o.CloudIDFrom = source
		o.Extra = map[string]string{"BULLPEN_AGENT_WORK_DIR": "/home/runner", "RUNNER_ALLOW_RUNASROOT": "1"}
		s, err := launchdata.CloudInit(bootstrap(domain.NewSecret()), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(source, func(t *testing.T) { shellcheck(t, "bash", s) })
		for name, v := range oddValues {
			o.Extra = map[string]string{"BULLPEN_AGENT_WORK_DIR": v, "ODD": v}
			s, err := launchdata.CloudInit(bootstrap(v), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Run(source+"/"+name, func(t *testing.T) { shellcheck(t, "bash", s, literalNotes) })
		}
	}
	// The env file is only ever sourced: its variables are used elsewhere.
	shellcheck(t, "sh", envFile(t, bootstrap(domain.NewSecret()), map[string]string{"A": "/x"}), "--exclude=SC2034")
	for _, v := range oddValues {
		shellcheck(t, "sh", envFile(t, bootstrap(v), map[string]string{"ODD": v}), "--exclude=SC2034", literalNotes)
	}
}

// The secret is in the settings part of the script, once, and nowhere else.
func TestSecretOnlyInTheSettingsPart(t *testing.T) {
	secret := domain.NewSecret()
	s, err := launchdata.CloudInit(bootstrap(secret), options())
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(s, launchdata.SettingsBegin)
	settings, after, ok2 := strings.Cut(rest, launchdata.SettingsEnd)
	if !ok || !ok2 {
		t.Fatal("the settings markers are missing")
	}
	if strings.Count(settings, secret) != 1 || strings.Contains(before+after, secret) {
		t.Fatalf("the secret appears %d times in the settings and %t outside", strings.Count(settings, secret),
			strings.Contains(before+after, secret))
	}
}

func TestCloudInitRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*launchdata.CloudInitOptions)
		want string
	}{
		{"a checksum without a URL", func(o *launchdata.CloudInitOptions) { o.AgentURL = "" }, "checksum without a URL"},
		{"relative URL", func(o *launchdata.CloudInitOptions) { o.AgentURL = "downloads/bullpen" }, "want http(s)"},
		{"URL with a space", func(o *launchdata.CloudInitOptions) { o.AgentURL = "https://x/a b" }, "want http(s)"},
		{"short checksum", func(o *launchdata.CloudInitOptions) { o.AgentSHA256 = "abc" }, "64 hex"},
		{"no checksum", func(o *launchdata.CloudInitOptions) { o.AgentSHA256 = "" }, "64 hex"},
		{"odd path", func(o *launchdata.CloudInitOptions) { o.EnvPath = "/etc/bull pen/agent.env" }, "env path"},
		{"relative path", func(o *launchdata.CloudInitOptions) { o.InstallPath = "bin/bullpen" }, "install path"},
		{"dot-dot", func(o *launchdata.CloudInitOptions) { o.StateDir = "/var/../etc" }, "state dir"},
		{"unknown metadata", func(o *launchdata.CloudInitOptions) { o.CloudIDFrom = "gcp" }, "cloud id source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options()
			tc.edit(&o)
			if _, err := launchdata.CloudInit(bootstrap("s"), o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	// Upper-case checksums are fine.
	o := options()
	o.AgentSHA256 = strings.ToUpper(o.AgentSHA256)
	if _, err := launchdata.CloudInit(bootstrap("s"), o); err != nil {
		t.Fatal(err)
	}
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Check refuses what CloudInit would refuse, before any launch.
func TestCheckRefusesWhatCloudInitWould(t *testing.T) {
	if err := options().Check(); err != nil {
		t.Fatalf("good options: %v", err)
	}
	bad := options()
	bad.Extra = map[string]string{"NOT A NAME": "x"}
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "not a shell variable name") {
		t.Fatalf("an extra setting that is no variable name: %v", err)
	}
	bad = options()
	bad.AgentSHA256 = "abc"
	if err := bad.Check(); err == nil {
		t.Fatal("a short checksum passed")
	}
}

// A setting the user data writes itself is refused, named, by Check and by
// CloudInit: given in Extra it used to be replaced without a word.
func TestCloudInitRefusesTheSettingsItWritesItself(t *testing.T) {
	for _, k := range []string{launchdata.EnvStateDir, launchdata.EnvCloudIDFrom, launchdata.EnvCloudID} {
		o := options()
		o.Extra = map[string]string{k: "x", "BULLPEN_AGENT_WORK_DIR": "/home/runner"}
		if err := o.Check(); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("Check with %s: %v, want an error naming it", k, err)
		}
		if _, err := launchdata.CloudInit(bootstrap("s"), o); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("CloudInit with %s: %v, want an error naming it", k, err)
		}
	}
}
