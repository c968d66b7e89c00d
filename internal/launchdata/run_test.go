package launchdata_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/launchdata"
)

// machine is a fake machine for the user-data script: its paths live in a
// temporary root, and curl, systemctl and chown are stand-ins that serve a
// fake binary and record what they were asked.
type machine struct {
	t      *testing.T
	root   string
	binary []byte // what the download serves
}

func newMachine(t *testing.T) *machine {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	m := &machine{t: t, root: t.TempDir(), binary: []byte("#!/bin/sh\necho fake bullpen\n")}
	fakes := map[string]string{
		// curl ... -o FILE URL: writes the fake binary to FILE.
		"curl": `#!/bin/sh
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then out="$2"; shift; fi
  shift
done
cp "$FAKE_ROOT/served" "$out"
`,
		"systemctl": "#!/bin/sh\nprintf '%s\\n' \"$*\" >> \"$FAKE_ROOT/systemctl.log\"\n",
		"shutdown":  "#!/bin/sh\nprintf 'shutdown %s\\n' \"$*\" >> \"$FAKE_ROOT/halted.log\"\n",
		"chown":     "#!/bin/sh\nprintf '%s\\n' \"$*\" >> \"$FAKE_ROOT/chown.log\"\n",
	}
	os.MkdirAll(filepath.Join(m.root, "fakebin"), 0o755)
	for name, body := range fakes {
		if err := os.WriteFile(filepath.Join(m.root, "fakebin", name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func (m *machine) path(p string) string { return filepath.Join(m.root, p) }

// options places every path of the script under the machine's root.
func (m *machine) options() launchdata.CloudInitOptions {
	o := options()
	o.AgentSHA256 = sha(m.binary)
	o.InstallPath, o.EnvPath = m.path("usr/local/bin/bullpen"), m.path("etc/bullpen/agent.env")
	o.StateDir, o.UnitDir = m.path("var/lib/bullpen-agent"), m.path("etc/systemd/system")
	return o
}

// run runs the script as cloud-init would, and returns its output.
func (m *machine) run(script string, served []byte) (string, error) {
	m.t.Helper()
	if err := os.WriteFile(m.path("served"), served, 0o600); err != nil {
		m.t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = m.root
	cmd.Env = append(os.Environ(), "PATH="+m.path("fakebin")+":"+os.Getenv("PATH"), "FAKE_ROOT="+m.root)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (m *machine) read(p string) string {
	m.t.Helper()
	data, err := os.ReadFile(m.path(p))
	if err != nil {
		m.t.Fatal(err)
	}
	return string(data)
}

func (m *machine) mode(p string) os.FileMode {
	m.t.Helper()
	st, err := os.Stat(m.path(p))
	if err != nil {
		m.t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestCloudInitInstallsAndStartsTheAgent(t *testing.T) {
	for name, v := range oddValues {
		t.Run(name, func(t *testing.T) {
			m := newMachine(t)
			o := m.options()
			o.Extra = map[string]string{"ODD": v}
			b := bootstrap(v)
			script, err := launchdata.CloudInit(b, o)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := m.run(script, m.binary); err != nil {
				t.Fatalf("script failed: %v\n%s", err, out)
			}
			if _, err := os.Stat(m.path("PWNED")); err == nil {
				t.Fatal("a value ran a command")
			}
			// The settings file is exactly the env file, private to root.
			extra := map[string]string{"ODD": v, launchdata.EnvStateDir: o.StateDir, launchdata.EnvCloudIDFrom: "imds"}
			// Machines of a launch share its user data: the launch secret,
			// from which each agent derives its own.
			want := strings.Replace(envFile(t, b, extra), launchdata.EnvBootstrap+"=", launchdata.EnvLaunchSecret+"=", 1)
			if got := m.read("etc/bullpen/agent.env"); got != want {
				t.Fatalf("env file:\n%q\nwant\n%q", got, want)
			}
			if m.mode("etc/bullpen/agent.env") != 0o600 || m.mode("etc/bullpen") != 0o700 {
				t.Fatalf("env file %s in a %s directory", m.mode("etc/bullpen/agent.env"), m.mode("etc/bullpen"))
			}
			if !strings.Contains(m.read("chown.log"), "root:root "+m.path("etc/bullpen/agent.env.tmp")) {
				t.Fatal("the env file was not given to root")
			}
			if m.read("usr/local/bin/bullpen") != string(m.binary) || m.mode("usr/local/bin/bullpen") != 0o755 {
				t.Fatal("the binary was not installed")
			}
			unit := m.read("etc/systemd/system/bullpen-agent.service")
			for _, want := range []string{
				"ExecStart=" + o.InstallPath + " agent --config " + o.EnvPath + "\n", "Restart=on-failure\n",
				"RestartPreventExitStatus=3 4 78\n", "WantedBy=multi-user.target\n",
				"ExecStopPost=" + m.path("usr/local/bin/"+launchdata.StoppedName) + "\n",
			} {
				if !strings.Contains(unit, want) {
					t.Fatalf("unit lacks %q:\n%s", want, unit)
				}
			}
			if got := m.read("systemctl.log"); got != "daemon-reload\nenable --now bullpen-agent.service\n" {
				t.Fatalf("systemctl calls:\n%s", got)
			}
			// The agent can load what was written.
			cfg, _, err := agent.LoadConfig([]string{"--config", o.EnvPath}, func(string) string { return "" }, nil)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.LaunchSecret != v || cfg.Bootstrap != "" || cfg.CloudIDFrom != "imds" || cfg.StateDir != o.StateDir || cfg.URL != b.URL {
				t.Fatalf("the agent read %+v", cfg)
			}
		})
	}
}

func TestCloudInitRefusesABinaryWithAnotherChecksum(t *testing.T) {
	m := newMachine(t)
	script, err := launchdata.CloudInit(bootstrap("s"), m.options())
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.run(script, []byte("a tampered binary"))
	if err == nil || !strings.Contains(out, "checksum does not match") {
		t.Fatalf("the script accepted a tampered binary: %v\n%s", err, out)
	}
	for _, p := range []string{"usr/local/bin/bullpen", "systemctl.log"} {
		if _, err := os.Stat(m.path(p)); err == nil {
			t.Fatalf("%s exists after a refused download", p)
		}
	}
}

// Without a download URL the binary is the one baked into the image: the
// script checks it is there and starts it.
func TestCloudInitWithTheBinaryBakedIn(t *testing.T) {
	m := newMachine(t)
	o := m.options()
	o.AgentURL, o.AgentSHA256 = "", ""
	script, err := launchdata.CloudInit(bootstrap("s3cret"), o)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(script, "curl") {
		t.Fatal("the script downloads a binary it was told is in the image")
	}
	if out, err := m.run(script, m.binary); err == nil {
		t.Fatalf("the script ran without a binary in the image:\n%s", out)
	}
	if err := os.MkdirAll(m.path("usr/local/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.path("usr/local/bin/bullpen"), m.binary, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := m.run(script, m.binary); err != nil {
		t.Fatalf("script failed with the binary in the image: %v\n%s", err, out)
	}
	if got := m.read("systemctl.log"); !strings.Contains(got, "enable --now bullpen-agent.service") {
		t.Fatalf("systemctl calls:\n%s", got)
	}
}

// After the agent exits 78 (settings that cannot work) or 3 (credentials
// refused), statuses the unit does not restart, the unit's stop shuts the
// machine down with the agent's shutdown command, rather than leave it
// running with no agent. Any other end leaves the machine alone: the agent
// is restarted, stopped on purpose, or shut the machine down itself. A
// crash (Go exits 2 after a panic) is restarted: shutting down would lose
// the machine's pool place or the job it runs.
func TestTheUnitShutsDownAMachineWhoseAgentCannotRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shutdown string // the agent's shutdown command, "" for the default
		code     string // systemd's EXIT_CODE
		status   string // and EXIT_STATUS
		want     string // what halted.log holds after
	}{
		{"bad settings", "", "exited", "78", "shutdown -h now\n"},
		{"credentials refused", "", "exited", "3", "shutdown -h now\n"},
		{"its own shutdown command", `printf 'own %s\n' "$RUNNER_ALLOW_RUNASROOT" >> "$FAKE_ROOT/halted.log"`, "exited", "3", "own \n"},
		{"a failure restarted", "", "exited", "1", ""},
		{"a crash restarted", "", "exited", "2", ""},
		{"shut down by the agent", "", "exited", "4", ""},
		{"stopped", "", "exited", "0", ""},
		{"killed", "", "killed", "TERM", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t)
			o := m.options()
			o.Extra = map[string]string{"RUNNER_ALLOW_RUNASROOT": "1"}
			if tc.shutdown != "" {
				o.Extra["BULLPEN_AGENT_SHUTDOWN_COMMAND"] = tc.shutdown
			}
			script, err := launchdata.CloudInit(bootstrap("s3cret"), o)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := m.run(script, m.binary); err != nil {
				t.Fatalf("script failed: %v\n%s", err, out)
			}
			stopped := m.path("usr/local/bin/" + launchdata.StoppedName)
			if m.mode("usr/local/bin/"+launchdata.StoppedName) != 0o755 {
				t.Fatalf("%s is not executable", stopped)
			}
			cmd := exec.Command(stopped)
			cmd.Env = []string{"PATH=" + m.path("fakebin") + ":" + os.Getenv("PATH"), "FAKE_ROOT=" + m.root,
				"EXIT_CODE=" + tc.code, "EXIT_STATUS=" + tc.status}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", stopped, err, out)
			}
			got, _ := os.ReadFile(m.path("halted.log"))
			if string(got) != tc.want {
				t.Fatalf("halted.log %q, want %q", got, tc.want)
			}
		})
	}
}

// The script the unit runs when the agent stops passes shellcheck.
func TestTheStoppedScriptPassesShellcheck(t *testing.T) {
	m := newMachine(t)
	script, err := launchdata.CloudInit(bootstrap("s3cret"), m.options())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := m.run(script, m.binary); err != nil {
		t.Fatalf("script failed: %v\n%s", err, out)
	}
	shellcheck(t, "sh", m.read("usr/local/bin/"+launchdata.StoppedName))
}

// The unit's stop falls back on the agent's own default shutdown command.
func TestTheStoppedScriptDefaultsToTheAgentsShutdownCommand(t *testing.T) {
	script, err := launchdata.CloudInit(bootstrap("s3cret"), options())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(script, `"${shutdown_command:-`+agent.DefaultShutdownCommand+`}"`) {
		t.Fatalf("the script does not fall back on %q", agent.DefaultShutdownCommand)
	}
}
