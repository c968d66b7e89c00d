package agent_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestParseEnvFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		want map[string]string
	}{
		{"plain", "A=1\nB=two\n", map[string]string{"A": "1", "B": "two"}},
		{"comments and blanks", "# head\n\n  A=1 # trailing\n\t# indented\n", map[string]string{"A": "1"}},
		{"export", "export A='x y'\n", map[string]string{"A": "x y"}},
		{"single quotes keep everything", `A='$HOME "q" \n ; | & $(x) ` + "`y`'", map[string]string{"A": `$HOME "q" \n ; | & $(x) ` + "`y`"}},
		{"escaped single quote", `A='it'\''s'`, map[string]string{"A": "it's"}},
		{"double quotes", `A="a \"b\" \\ \$ \x"`, map[string]string{"A": `a "b" \ $ \x`}},
		{"concatenation", `A=a'b c'"d"\ e`, map[string]string{"A": "ab cd e"}},
		{"multi-line value", "A='one\ntwo'\nB=3", map[string]string{"A": "one\ntwo", "B": "3"}},
		{"empty", "A=\nB=''", map[string]string{"A": "", "B": ""}},
		{"later wins", "A=1\nA=2", map[string]string{"A": "2"}},
		{"crlf", "A=1\r\nB='2'\r\n", map[string]string{"A": "1", "B": "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := agent.ParseEnvFile(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestParseEnvFileRefusesWhatAShellWouldRun(t *testing.T) {
	for _, text := range []string{
		"A=$HOME", "A=`id`", "A=x;rm", "A=x | y", "A=$(id)", `A="$HOME"`, "A=x y", "A='open",
		`A="open`, "=1", "1A=2", "A", "A=x\\", "A=(x)",
	} {
		_, err := agent.ParseEnvFile(text)
		if err == nil {
			t.Errorf("%q parsed", text)
			continue
		}
		if !strings.HasPrefix(err.Error(), "line 1:") {
			t.Errorf("%q: error %q does not name the line", text, err)
		}
	}
	if _, err := agent.ParseEnvFile("A=s3cr3t-value x"); err == nil || strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), " x") {
		t.Fatalf("an error repeats the file's text: %v", err)
	}
}

func TestLoadConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.env")
	os.WriteFile(file, []byte(strings.Join([]string{
		"BULLPEN_AGENT_URL='http://file:1'",
		"BULLPEN_AGENT_LAUNCH_ID='lt-file'",
		"BULLPEN_AGENT_BOOTSTRAP='secret'",
		"BULLPEN_AGENT_CLOUD_ID='i-file'",
		"BULLPEN_AGENT_POLL_WAIT='10s'",
		"BULLPEN_AGENT_FUTURE_SETTING='x'",
		"RUNNER_ALLOW_RUNASROOT='1'",
	}, "\n")), 0o600)
	env := map[string]string{"BULLPEN_AGENT_CLOUD_ID": "i-env", "BULLPEN_AGENT_STATE_DIR": "/tmp/env-state"}
	cfg, warnings, err := agent.LoadConfig([]string{"--config", file, "--state-dir", "/tmp/flag-state"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.URL != "http://file:1" || cfg.LaunchID != "lt-file" || cfg.Bootstrap != "secret" {
		t.Fatalf("file values not read: %+v", cfg)
	}
	if cfg.CloudID != "i-env" || cfg.StateDir != "/tmp/flag-state" || cfg.PollWait != 10*time.Second {
		t.Fatalf("precedence (defaults < file < environment < flags) broken: %+v", cfg)
	}
	if cfg.RunnerCommand != agent.DefaultRunnerCommand || cfg.ShutdownCommand != agent.DefaultShutdownCommand ||
		cfg.UnreachableDeadline != 20*time.Minute || cfg.HeartbeatEvery != 5*time.Second || cfg.SpotWatchEvery != 5*time.Second {
		t.Fatalf("defaults not applied: %+v", cfg)
	}
	if len(cfg.Env) != 1 || cfg.Env[0] != "RUNNER_ALLOW_RUNASROOT=1" {
		t.Fatalf("other settings for the commands: %q", cfg.Env)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "BULLPEN_AGENT_FUTURE_SETTING") {
		t.Fatalf("warnings %q", warnings)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	base := []string{"--url", "http://cp:8080", "--cloud-id", "i-1"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no url", []string{"--cloud-id", "i-1"}, "no control plane URL"},
		{"bad url", []string{"--url", "cp:8080", "--cloud-id", "i-1"}, "want http(s)://"},
		{"no cloud id", []string{"--url", "http://cp"}, "no cloud id"},
		{"bad cloud id source", []string{"--url", "http://cp", "--cloud-id-from", "gcp"}, "want imds or digitalocean"},
		{"bad duration", append(base, "--unreachable-deadline", "soon"), "--unreachable-deadline"},
		{"bad pattern", append(base, "--job-started-pattern", "("), "not a regular expression"},
		{"negative spot watch", append(base, "--spot-watch-interval", "-5s"), "--spot-watch-interval"},
		{"bad log level", append(base, "--log-level", "loud"), "--log-level"},
		{"stray argument", append(base, "extra"), "unexpected arguments"},
		{"missing file", append(base, "--config", "/nonexistent/agent.env"), "read config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := agent.LoadConfig(tc.args, func(string) string { return "" }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	if _, _, err := agent.LoadConfig([]string{"-h"}, func(string) string { return "" }, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}

// The environment names are part of the launch data contract.
func TestEnvNames(t *testing.T) {
	names := strings.Join(agent.EnvNames(), " ")
	for _, want := range []string{
		"BULLPEN_AGENT_URL", "BULLPEN_AGENT_LAUNCH_ID", "BULLPEN_AGENT_BOOTSTRAP", "BULLPEN_AGENT_CLOUD_ID",
		"BULLPEN_AGENT_CLOUD_ID_FROM", "BULLPEN_AGENT_STATE_DIR", "BULLPEN_AGENT_RUNNER_COMMAND",
		"BULLPEN_AGENT_WARMUP_COMMAND", "BULLPEN_AGENT_CLEANUP_COMMAND", "BULLPEN_AGENT_SHUTDOWN_COMMAND",
		"BULLPEN_AGENT_UNREACHABLE_DEADLINE", "BULLPEN_AGENT_WORK_DIR", "BULLPEN_AGENT_JOB_STARTED_PATTERN",
		"BULLPEN_AGENT_SPOT_WATCH_INTERVAL",
	} {
		if !strings.Contains(" "+names+" ", " "+want+" ") {
			t.Errorf("%s is not read", want)
		}
	}
}

func TestCloudIDFromMetadata(t *testing.T) {
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token" && r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") != "":
			io.WriteString(w, "session")
		case r.Method == http.MethodGet && r.URL.Path == "/latest/meta-data/instance-id" && r.Header.Get("X-aws-ec2-metadata-token") == "session":
			io.WriteString(w, "i-0abc\n")
		case r.Method == http.MethodGet && r.URL.Path == "/metadata/v1/id":
			io.WriteString(w, "123456")
		default:
			w.WriteHeader(http.StatusUnauthorized) // IMDSv2 refuses calls without the session token
		}
	}))
	defer imds.Close()
	ctx := context.Background()
	for source, want := range map[string]string{"imds": "i-0abc", "digitalocean": "123456"} {
		got, err := agent.CloudIDFromMetadata(ctx, imds.Client(), imds.URL, source)
		if err != nil || got != want {
			t.Fatalf("%s: %q, %v; want %q", source, got, err, want)
		}
	}
	if _, err := agent.CloudIDFromMetadata(ctx, imds.Client(), imds.URL, "gcp"); err == nil {
		t.Fatal("an unknown source worked")
	}
}

// An agent told to read its cloud id from the metadata service says hello
// with it.
func TestAgentReadsItsCloudIDFromMetadata(t *testing.T) {
	r := newRig(t)
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			io.WriteString(w, "session")
			return
		}
		io.WriteString(w, "i-bp-1")
	}))
	defer imds.Close()
	cfg := r.launched("bp-1")
	cfg.CloudID, cfg.CloudIDFrom, cfg.MetadataURL = "", "imds", imds.URL
	g := r.run(cfg)
	r.cp.Calls.Await(t, 1, func(c agentapitestCall) bool { return c.Op == "signal" && c.CloudID == "i-bp-1" })
	if err := g.stop(); err != nil {
		t.Fatal(err)
	}
}

// On EC2 the user data holds the launch's secret, shared by the fleet's
// machines: the agent derives its machine's own from it and the instance id
// it reads from IMDSv2, and presents the instance identity document too.
func TestAgentDerivesItsMachineSecretFromTheLaunchSecret(t *testing.T) {
	r := newRig(t)
	var sawDocument atomic.Bool
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/latest/api/token":
			io.WriteString(w, "session")
		case "/latest/meta-data/instance-id":
			io.WriteString(w, "i-bp-1")
		case "/latest/dynamic/instance-identity/document":
			sawDocument.Store(true)
			io.WriteString(w, `{"instanceId":"i-bp-1","region":"us-east-1"}`)
		case "/latest/dynamic/instance-identity/signature":
			io.WriteString(w, "c2lnbmVk")
		}
	}))
	defer imds.Close()
	launch := domain.NewSecret()
	r.cp.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateBooting, LaunchID: "lt-bp-1",
		BootstrapHash: domain.HashSecret(domain.MachineSecret(launch, "i-bp-1"))})
	cfg := r.config("bp-1", "")
	cfg.LaunchSecret, cfg.CloudID, cfg.CloudIDFrom, cfg.MetadataURL = launch, "", "imds", imds.URL
	g := r.run(cfg)
	r.cp.Calls.Await(t, 1, func(c agentapitestCall) bool { return c.Op == "signal" && c.CloudID == "i-bp-1" })
	if err := g.stop(); err != nil {
		t.Fatal(err)
	}
	if !sawDocument.Load() {
		t.Fatal("the agent said hello without its identity document")
	}
}

// A hand-written file: bare safe values read as launchdata's quoted ones do.
func TestLoadConfigReadsTheLocalProvidersFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.env")
	os.WriteFile(file, []byte("BULLPEN_AGENT_URL=http://127.0.0.1:8080\nBULLPEN_AGENT_LAUNCH_ID=lt-1\n"+
		"BULLPEN_AGENT_BOOTSTRAP=abc\nBULLPEN_AGENT_CLOUD_ID=local-1\nBULLPEN_AGENT_STATE_DIR=/tmp/m/state\n"+
		"BULLPEN_AGENT_RUNNER_COMMAND='sh ./fake.sh {jitconfig}'\n"), 0o600)
	cfg, warnings, err := agent.LoadConfig([]string{"--config", file}, func(string) string { return "" }, io.Discard)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("%v %q", err, warnings)
	}
	if cfg.LaunchID != "lt-1" || cfg.CloudID != "local-1" || cfg.StateDir != "/tmp/m/state" || cfg.RunnerCommand != "sh ./fake.sh {jitconfig}" {
		t.Fatalf("read %+v", cfg)
	}
}
