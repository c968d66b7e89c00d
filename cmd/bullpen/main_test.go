package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agent"
	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/autoscale"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/queue/sqs"
	"github.com/bullpen-ci/bullpen/internal/store/dynamodb"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

// runCmd runs the binary's entry point in-process.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runWithEnv(nil, args...)
}

// smallRunnerOn opens a configuration of one runner, small, on image; the
// pools follow.
func smallRunnerOn(image string) string {
	return "runners:\n  small:\n    image: " + image + "\n    ram: 1\n    family: [t3]\npools:\n"
}

// mustRun runs bullpen with args and no variables, and ends the test
// unless it exits 0.
func mustRun(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	code, stdout, stderr := runWithEnv(nil, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	return stdout, stderr
}

// wantAll reports each of wants that text, named by what, lacks.
func wantAll(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, text)
		}
	}
}

// writeFile writes text to dir/name, readable by its owner alone as
// settings and secrets are, and returns the path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestValidate(t *testing.T) {
	out, _ := mustRun(t, "validate", "../../examples/runs-on.yml")
	wantAll(t, "output", out, "small-x64: runner small-x64, env dev, tz Europe/Paris", "medium-x64:", "dependabot:", "ok (2 runners, 4 pools)")
	code, out, errs := runCmd(t, "validate", "../../examples/invalid.yml")
	if code != 1 || out != "" {
		t.Fatalf("invalid file: exit %d, stdout %q", code, out)
	}
	if !strings.Contains(errs, "../../examples/invalid.yml:") || strings.Count(errs, "\n") < 5 {
		t.Fatalf("errors not listed with positions:\n%s", errs)
	}
	if code, _, _ := runCmd(t, "validate"); code != 2 {
		t.Fatalf("no file: exit %d", code)
	}
	if code, _, errs := runCmd(t, "validate", "nope.yml"); code != 1 || !strings.Contains(errs, "nope.yml") {
		t.Fatalf("missing file: exit %d %s", code, errs)
	}
}

// validate refuses an autoscale block that serve refuses at start and at
// a reload with the same --converge-every (its polls come on the
// converger's cycles), placing it at the block, and takes it with a
// converger that cycles often enough.
func TestValidateRefusesWhatServeRefusesAtItsCadence(t *testing.T) {
	path := writeFile(t, t.TempDir(), "autoscale.yml", smallRunnerOn("ubuntu24-full-x64")+`  p1:
    runner: small
    schedule:
      - name: default
        hot: 1
    autoscale:
      poll-interval: 100s
`)
	code, out, errs := runCmd(t, "validate", path)
	if code != 1 || out != "" || !strings.Contains(errs, path+":12:5: pool \"p1\": breach-threshold 1.5 is never reached with the converger running every 30s") {
		t.Errorf("at serve's default --converge-every: exit %d, stdout %q, stderr:\n%s", code, out, errs)
	}
	if code, out, errs := runCmd(t, "validate", path, "--converge-every", "10s"); code != 0 || !strings.Contains(out, "ok (1 runners, 1 pools)") {
		t.Errorf("--converge-every 10s: exit %d:\n%s%s", code, out, errs)
	}
	if code, out, errs := runWithEnv(map[string]string{"BULLPEN_CONVERGE_EVERY": "10s"}, "validate", path); code != 0 {
		t.Errorf("$BULLPEN_CONVERGE_EVERY=10s: exit %d:\n%s%s", code, out, errs)
	}
	if code, _, errs := runCmd(t, "validate", "--converge-every", "0s", path); code != 2 || !strings.Contains(errs, "--converge-every 0s: want a positive duration") {
		t.Errorf("--converge-every 0s: exit %d:\n%s", code, errs)
	}
}

func TestSchedule(t *testing.T) {
	cases := []struct {
		at   string
		want string
	}{
		{"2026-11-23T10:00:00+01:00", `{"pool":"small-x64","schedule":"default","hot":1,"stopped":2}`},
		{"2026-11-23T23:30:00+01:00", `{"pool":"small-x64","schedule":"nights","hot":0,"stopped":2}`},
		{"2026-11-28T12:00:00+01:00", `{"pool":"small-x64","schedule":"weekends","hot":0,"stopped":1}`},
		// 05:30 Paris on Saturday is still Friday night's window, but weekends comes later.
		{"2026-11-28T05:30:00+01:00", `{"pool":"small-x64","schedule":"weekends","hot":0,"stopped":1}`},
	}
	for _, c := range cases {
		code, out, errs := runCmd(t, "schedule", "../../examples/runs-on.yml", "--pool", "small-x64", "--at", c.at)
		if code != 0 || strings.TrimSpace(out) != c.want {
			t.Errorf("at %s: exit %d, got %s%s", c.at, code, out, errs)
		}
	}
	// A pool whose schedule has no default and no match: empty entry, zeros.
	code, out, _ := runCmd(t, "schedule", "testdata/nodefault.yml", "--pool", "office", "--at", "2026-11-22T12:00:00Z")
	var got map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["schedule"] != "" || got["hot"] != 0.0 {
		t.Errorf("no match: exit %d, %s", code, out)
	}
	// A --pool the file lacks is a wrong value, as a bad --at is: 2.
	if code, _, errs := runCmd(t, "schedule", "../../examples/runs-on.yml", "--pool", "nope"); code != 2 || !strings.Contains(errs, `unknown pool "nope"`) {
		t.Errorf("unknown pool: exit %d, %s", code, errs)
	}
	if code, _, errs := runCmd(t, "schedule", "../../examples/runs-on.yml", "--pool", "small-x64", "--at", "tomorrow"); code != 2 || !strings.Contains(errs, "bad --at") {
		t.Errorf("bad time: exit %d, %s", code, errs)
	}
}

func TestUnknownCommandAndHelp(t *testing.T) {
	if code, _, errs := runCmd(t, "frobnicate"); code != 2 || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Fatalf("exit %d %s", code, errs)
	}
	if code, out, _ := runCmd(t, "help"); code != 0 || !strings.Contains(out, "demo") {
		t.Fatalf("help: exit %d %s", code, out)
	}
	if code, out, errs := runCmd(t); code != 2 || out != "" || !strings.Contains(errs, "demo") {
		t.Fatalf("no command: exit %d, stdout %q, stderr %s; want 2 and the usage on stderr", code, out, errs)
	}
}

func TestDemoJSON(t *testing.T) {
	out, errs := mustRun(t, "demo", "--speed", "0", "--duration", "10m", "--roll-at", "5m", "--json", "--start", "2026-11-23T10:00:00Z")
	var res struct {
		Pools []struct {
			Name     string
			Target   struct{ Hot, Stopped int }
			ReadyHot int  `json:"ready_hot"`
			Stopped  int  `json:"stopped"`
			AtTarget bool `json:"at_target"`
			Rolled   bool `json:"rolled"`
		}
		AllAtTarget bool `json:"all_at_target"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	if !res.AllAtTarget || len(res.Pools) != 4 {
		t.Fatalf("result %+v", res)
	}
	for _, p := range res.Pools {
		if !p.Rolled || p.ReadyHot != p.Target.Hot || p.Stopped != p.Target.Stopped {
			t.Errorf("pool %+v", p)
		}
	}
	if !strings.Contains(errs, "small-x64") {
		t.Errorf("cycle lines missing from stderr")
	}
}

func TestDeadlineFlag(t *testing.T) {
	d := domain.DefaultDeadlines()
	if err := setDeadline(&d, "releasing=30s"); err != nil || d.Releasing != 30*time.Second {
		t.Fatalf("releasing=30s: %v %v", err, d.Releasing)
	}
	for _, bad := range []string{"releasing", "releasing=0s", "nap=1m", "claimed=soon"} {
		if err := setDeadline(&d, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := setDeadline(&d, "nap=1m"); err == nil || !strings.Contains(err.Error(), "releasing=2m0s") {
		t.Errorf("an unknown state must list the states and their defaults: %v", err)
	}
}

// Secrets in the environment must not become flag defaults: -h and every
// flag error print the defaults.
func TestServeHelpAndFlagErrorsDoNotShowSecrets(t *testing.T) {
	const secret, token = "whsec-do-not-print", "tok-do-not-print"
	getenv := func(k string) string {
		return map[string]string{"BULLPEN_WEBHOOK_SECRET": secret, "BULLPEN_ADMIN_TOKEN": token}[k]
	}
	for _, args := range [][]string{{"serve", "-h"}, {"serve", "--no-such-flag"}, {"serve", "--converge-every", "soon"}} {
		var out, errb bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: getenv}
		if code := run(context.Background(), e, args); code == 1 {
			t.Fatalf("%v: exit 1", args)
		}
		all := out.String() + errb.String()
		if strings.Contains(all, secret) || strings.Contains(all, token) {
			t.Fatalf("%v printed a secret:\n%s", args, all)
		}
		if args[1] == "-h" && !strings.Contains(all, "BULLPEN_WEBHOOK_SECRET") {
			t.Fatalf("%v: usage does not name the secret's variable:\n%s", args, all)
		}
	}
	// The environment still supplies them.
	f := serveFlags{getenv: getenv}
	if s, tk, err := f.secrets(); err != nil || s != secret || tk != token {
		t.Fatalf("secrets from the environment: %v", err)
	}
}

// Every command answers -h with its usage and exit 0, and a flag it does
// not know with exit 2, as scripts and service managers expect; serve and
// the agent, which systemd runs, with 78 (EX_CONFIG), which their units do
// not restart, where 2 is also a crash's.
func TestEveryCommandsHelpExitsZeroAndAWrongFlagTwo(t *testing.T) {
	for name := range commands {
		wrongFlag := 2
		if name == "serve" || name == "agent" {
			wrongFlag = 78
		}
		for _, tc := range []struct {
			flag string
			want int
		}{{"-h", 0}, {"--no-such-flag", wrongFlag}} {
			var out, errb bytes.Buffer
			e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			if got := run(t.Context(), e, []string{name, tc.flag}); got != tc.want {
				t.Errorf("bullpen %s %s: exit %d, want %d\n%s%s", name, tc.flag, got, tc.want, out.String(), errb.String())
			}
			if tc.flag == "-h" && (out.Len() == 0 || errb.Len() != 0) {
				t.Errorf("bullpen %s -h: %d bytes of usage on stdout, %d on stderr; want it all on stdout (bullpen %s -h | grep …)", name, out.Len(), errb.Len(), name)
			}
			dispatcher := strings.Contains(errb.String(), "unknown subcommand") // lists its subcommands
			if tc.flag != "-h" && !dispatcher && (!strings.Contains(errb.String(), "-h' for its flags") || strings.Count(errb.String(), "\n") > 3) {
				t.Errorf("bullpen %s %s: want the error and where to find the flags, not the whole usage:\n%s", name, tc.flag, errb.String())
			}
			// The flag package takes a usage's first `quoted` words for the
			// value's name: "-store bullpen aws bootstrap" is what that reads.
			for _, line := range strings.Split(out.String()+errb.String(), "\n") {
				head, _, _ := strings.Cut(line, "\t") // a one-letter flag's usage follows a tab
				if tc.flag == "-h" && strings.HasPrefix(head, "  -") && len(strings.Fields(head)) > 2 {
					t.Errorf("bullpen %s -h: %q: a flag's value is named in several words", name, line)
				}
			}
		}
	}
}

// A word that is not a flag ends the flag package's parsing: a command
// that takes no arguments refuses it rather than ignore every flag after
// it (an unquoted value with a space, say).
func TestAStrayArgumentIsRefusedNotTheFlagsAfterItIgnored(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--local-agent-env", "CMD=runner", "{jitconfig}", "--listen", "127.0.0.1:1"},
		{"simulate", "--config", "x.yml", "extra", "--jobs", "j.jsonl"},
		{"status", "extra", "--server", "http://127.0.0.1:1"},
		{"bench", "extra", "--jobs", "5"},
		{"history", "export", "extra", "--repo", "a/b"},
		{"demo", "extra"},
		{"validate", "a.yml", "b.yml"},
		{"schedule", "../../examples/runs-on.yml", "--pool", "small-x64", "stray"},
	} {
		want := 2
		if args[0] == "serve" {
			want = 78 // its refusals are final for its systemd unit
		}
		var out, errb bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		if code := run(t.Context(), e, args); code != want || !strings.Contains(errb.String(), "unexpected argument") {
			t.Errorf("%v: exit %d, want %d and the argument named:\n%s", args, code, want, errb.String())
		}
	}
}

// A stray word after a secret's flag, the rest of a value with a space, is
// not shown: it would be part of the secret.
func TestAStrayWordAfterASecretIsNotShown(t *testing.T) {
	code, _, errOut := runWithEnv(nil, "serve", "--admin-token", "my", "s3cr3t-rest", "--listen", "127.0.0.1:1")
	if code != 78 || strings.Contains(errOut, "s3cr3t") || !strings.Contains(errOut, "unexpected argument after --admin-token") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
}

// A duration without its unit is named as such, where the flag package
// says only "parse error".
func TestABadDurationSaysWhatADurationIs(t *testing.T) {
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	if code := run(t.Context(), e, []string{"serve", "--converge-every", "10"}); code != 78 ||
		!strings.Contains(errb.String(), `bullpen serve: --converge-every "10": want a duration with its unit, such as 30s`) {
		t.Fatalf("exit %d:\n%s", code, errb.String())
	}
}

// serve names every problem of its flags at once, and refuses a duration
// that is not positive (or a loop interval too short to be meant) where it
// used to take the default without a word.
func TestServeNamesEveryBadFlagAtOnce(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"BULLPEN_WEBHOOK_SECRET": "s", "BULLPEN_ADMIN_TOKEN": "test-admin-token"}[k]
	}
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: getenv}
	code := run(t.Context(), e, []string{"serve", "--config", "../../examples/runs-on.yml", "--listen", "127.0.0.1:0",
		"--log-level", "loud", "--cloud", "mars", "--reap-every", "1ns", "--job-retention", "-1h", "--converge-every", "0s",
		"--runner-scope", "orgs", "--sim-jobs-per-minute", "-3"})
	if code != 78 {
		t.Fatalf("exit %d, want 78\n%s", code, errb.String())
	}
	wantAll(t, "stderr", errb.String(), `--log-level "loud"`, `--cloud "mars"`, "--reap-every 1ns: want at least 100ms",
		"--job-retention -1h0m0s: want a positive duration", "--converge-every 0s: want a positive duration",
		`runner scope "orgs": want repo, org or enterprise`, "--sim-jobs-per-minute -3: want a number not below 0")
}

// serve refuses a silence allowance, or a claim's heartbeat age, that
// agents beating as they should cannot meet, at the agents' default
// interval or the one their settings give, naming the flag and the least
// it takes.
func TestServeRefusesHeartbeatAllowancesAgentsCannotMeet(t *testing.T) {
	check := func(args ...string) string {
		t.Helper()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var f serveFlags
		f.define(fs, func(string) string { return "" })
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := f.checkDurations(); err != nil {
			return err.Error()
		}
		return ""
	}
	for _, tc := range []struct {
		args []string
		want string // "" for none
	}{
		{[]string{"--silent-after", "2s"}, "--silent-after 2s: want at least 16s, three of the agents' heartbeats (every 5s, the agents' default) and --heartbeat-flush (1s)"},
		{[]string{"--silent-after", "3s", "--heartbeat-flush", "3s"}, "--silent-after 3s: want at least 18s"},
		{[]string{"--silent-after", "16s"}, ""},
		{[]string{"--claim-heartbeat-max-age", "3s"}, "--claim-heartbeat-max-age 3s: want at least 11s, two of the agents' heartbeats"},
		{[]string{"--claim-heartbeat-max-age", "11s"}, ""},
		{[]string{"--cloud", "local", "--local-agent-env", "BULLPEN_AGENT_HEARTBEAT_INTERVAL=10s", "--silent-after", "30s"},
			"--silent-after 30s: want at least 31s, three of the agents' heartbeats (every 10s, BULLPEN_AGENT_HEARTBEAT_INTERVAL=10s of --local-agent-env)"},
		{[]string{"--cloud", "local", "--local-agent-env", "BULLPEN_AGENT_HEARTBEAT_INTERVAL=500ms", "--silent-after", "3s"}, ""},
		{[]string{"--cloud", "aws", "--aws-agent-env", "BULLPEN_AGENT_HEARTBEAT_INTERVAL=20s"}, "--claim-heartbeat-max-age 15s: want at least 41s"},
		{[]string{"--store", "dynamodb://bullpen", "--silent-after", "40s"}, "--silent-after 40s: want at least 46s"},
	} {
		got := check(tc.args...)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%v: got %q, want %q", tc.args, got, tc.want)
		}
	}
	// Named with serve's other problems (here: no configuration).
	code, _, errs := runWithEnv(map[string]string{"BULLPEN_WEBHOOK_SECRET": "s", "BULLPEN_ADMIN_TOKEN": "test-admin-token"},
		"serve", "--listen", "127.0.0.1:0", "--silent-after", "3s")
	if code != 78 || !strings.Contains(errs, "--silent-after 3s: want at least 16s") {
		t.Errorf("serve --silent-after 3s: exit %d:\n%s", code, errs)
	}
}

// A BULLPEN_* variable that names no setting is named at start, with the
// setting it most likely misspells, and never its value: otherwise serve
// starts on the default it was meant to change without a word. The
// variables of secrets, of other commands and of the agent are no strays.
func TestServeNamesAVariableThatSetsNothing(t *testing.T) {
	vars := map[string]string{
		"BULLPEN_ENVIROMENT":           "dev",
		"BULLPEN_GITHUB_APP_KEY":       "-----BEGIN RSA PRIVATE KEY----- MIIEstray",
		"BULLPEN_FROBNICATE":           "s3cr3t-stray",
		"BULLPEN_WEBHOOK_SECRET":       "s",
		"BULLPEN_ADMIN_TOKEN_FILE":     "/nonexistent/admin-token",
		"BULLPEN_GITHUB_TOKEN":         "ghp_x",
		"BULLPEN_SERVER":               "http://127.0.0.1:8080",
		"BULLPEN_AGENT_RUNNER_COMMAND": "./run.sh --jitconfig {jitconfig}",
		"BULLPEN_CLOUD":                "sim",
		"GITHUB_TOKEN":                 "ghp_y",
	}
	code, _, errs := runWithEnv(vars, "serve", "--listen", "127.0.0.1:0")
	if code != 78 {
		t.Fatalf("exit %d, want 78 (no configuration):\n%s", code, errs)
	}
	warnings := strings.Count(errs, "level=WARN")
	for _, want := range []string{
		"variable=BULLPEN_ENVIROMENT did_you_mean=BULLPEN_ENVIRONMENT",
		"variable=BULLPEN_GITHUB_APP_KEY did_you_mean=BULLPEN_GITHUB_APP_KEY_FILE",
		"variable=BULLPEN_FROBNICATE\n",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("the start does not say %q:\n%s", want, errs)
		}
	}
	if warnings != 3 || strings.Contains(errs, "MIIE") || strings.Contains(errs, "s3cr3t") {
		t.Errorf("%d warnings, want 3 and no value shown:\n%s", warnings, errs)
	}
}

// Agent settings that no machine's agent can run with stop serve with
// status 78 (EX_CONFIG), which its systemd unit does not restart: a
// restart mends nothing, where the loop of restarts hid them.
func TestServeExitsSeventyEightForAgentSettingsThatCannotWork(t *testing.T) {
	code, _, errs := runWithEnv(map[string]string{"BULLPEN_WEBHOOK_SECRET": "s", "BULLPEN_ADMIN_TOKEN": "test-admin-token"},
		"serve", "--config", "../../examples/runs-on.yml", "--listen", "127.0.0.1:0", "--environment", "dev",
		"--store", "sqlite://"+filepath.Join(t.TempDir(), "bullpen.db"), "--cloud", "local", "--local-dir", t.TempDir(),
		"--local-agent-env", "BULLPEN_AGENT_RUNER_COMMAND=./run.sh {jitconfig}")
	if code != 78 || !strings.Contains(errs, "BULLPEN_AGENT_RUNER_COMMAND") {
		t.Errorf("exit %d, want 78:\n%s", code, errs)
	}
}

// serve -h tells the shutdown in the order serve stops: the loops first,
// while HTTP still answers agents, then the requests still open.
func TestServeHelpTellsTheShutdownInOrder(t *testing.T) {
	_, out, _ := runCmd(t, "serve", "-h")
	if !strings.Contains(out, "on SIGTERM, how long the loops, and then the requests still open, each get to finish") {
		t.Errorf("serve -h does not tell the shutdown's order:\n%s", out)
	}
}

// A short admin token is refused at start, named but not shown: it keys
// the dashboard's sessions, and a cookie lets it be guessed offline.
func TestServeRefusesAShortAdminToken(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"BULLPEN_WEBHOOK_SECRET": "s", "BULLPEN_ADMIN_TOKEN": "hunter2"}[k]
	}
	var errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &errb, getenv: getenv}
	code := run(t.Context(), e, []string{"serve", "--config", "../../examples/runs-on.yml", "--listen", "127.0.0.1:0"})
	if code != 78 || !strings.Contains(errb.String(), "the admin token is 7 characters: want at least 16") {
		t.Fatalf("exit %d, want 78 naming the short admin token\n%s", code, errb.String())
	}
	if strings.Contains(errb.String(), "hunter2") {
		t.Fatalf("the token is in the message:\n%s", errb.String())
	}
}

// A runner scope that does not go with the GitHub asked for is a problem of
// the command line, named with the others: exit 78, where it was found only
// once the app was built and exited 1, after the other problems were fixed.
func TestServeNamesARunnerScopeProblemWithTheOthers(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"BULLPEN_WEBHOOK_SECRET": "s", "BULLPEN_ADMIN_TOKEN": "test-admin-token"}[k]
	}
	var errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &errb, getenv: getenv}
	code := run(t.Context(), e, []string{"serve", "--config", "../../examples/runs-on.yml", "--listen", "127.0.0.1:0",
		"--runner-scope", "enterprise", "--converge-every", "1ms"})
	if code != 78 {
		t.Fatalf("exit %d, want 78\n%s", code, errb.String())
	}
	wantAll(t, "stderr", errb.String(), "runner scope enterprise needs the enterprise's slug", "--converge-every 1ms")
}

// A variable that sets a flag is parsed as the flag is, and a value it
// refuses is named with the other problems, where it was dropped without a
// word and the default taken.
func TestServeNamesAVariableItCannotParse(t *testing.T) {
	vars := map[string]string{"BULLPEN_WEBHOOK_SECRET": "s", "BULLPEN_ADMIN_TOKEN": "test-admin-token",
		"BULLPEN_CONVERGE_EVERY": "fast", "BULLPEN_SPOT_BREAKER_INTERRUPTIONS": "two",
		"BULLPEN_CANCEL_REJECTED": "yes", "BULLPEN_AWS_NO_SPOT_FALLBACK": "sure"}
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	code := run(t.Context(), e, []string{"serve", "--config", "../../examples/runs-on.yml", "--listen", "127.0.0.1:0", "--cloud", "mars"})
	if code != 78 {
		t.Fatalf("exit %d, want 78\n%s", code, errb.String())
	}
	wantAll(t, "stderr", errb.String(), `$BULLPEN_CONVERGE_EVERY="fast": time: invalid duration "fast"`,
		`$BULLPEN_SPOT_BREAKER_INTERRUPTIONS="two": want a whole number`, `$BULLPEN_CANCEL_REJECTED="yes": want true or false`,
		`$BULLPEN_AWS_NO_SPOT_FALLBACK="sure": want true or false`, `--cloud "mars"`)
	// A flag given on the command line wins over its variable, a bad one too.
	errb.Reset()
	run(t.Context(), e, []string{"serve", "--config", "../../examples/runs-on.yml", "--listen", "127.0.0.1:0", "--cloud", "mars",
		"--converge-every", "10s"})
	if strings.Contains(errb.String(), "BULLPEN_CONVERGE_EVERY") || !strings.Contains(errb.String(), "BULLPEN_CANCEL_REJECTED") {
		t.Errorf("with --converge-every given, stderr:\n%s\nwant the other variables' problems only", errb.String())
	}
}

// A configuration serve cannot use is named once, for what it is: none
// given, a file that is not there, a file with nothing in it. A store
// yet to be created is not created for it; one that exists is asked for
// the file last in force, and says it keeps none.
func TestServeNamesAConfigurationItCannotUse(t *testing.T) {
	empty := writeFile(t, t.TempDir(), "runs-on.yml", "# to be written\n")
	newStore := filepath.Join(t.TempDir(), "bullpen.db")
	vars := map[string]string{"BULLPEN_WEBHOOK_SECRET": "s", "BULLPEN_ADMIN_TOKEN": "test-admin-token", "BULLPEN_STORE": "sqlite://" + newStore}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "bullpen serve: no configuration: pass --config FILE or set $BULLPEN_CONFIG\n"},
		{[]string{"--config", "nosuch.yml"}, "bullpen serve: --config: open nosuch.yml: no such file or directory\n"},
		{[]string{"--config", empty}, "the file holds no configuration; to have no pools, write pools: {}"},
		{[]string{"--config", empty, "--store", "sqlite://" + sqlitetest.Path(t)}, "the file holds no configuration; to have no pools, write pools: {}\nno earlier configuration to start on: the store keeps none from " + empty},
	} {
		var out, errb bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
		code := run(t.Context(), e, append([]string{"serve", "--listen", "127.0.0.1:0"}, tc.args...))
		if code != 78 || !strings.Contains(errb.String(), tc.want) || strings.Count(errb.String(), "\n") > 3 {
			t.Errorf("serve %v: exit %d, stderr:\n%s\nwant exit 78 and only %q", tc.args, code, errb.String(), tc.want)
		}
	}
	if _, err := os.Stat(newStore); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused start left a store behind: %v", err)
	}
}

// A serve restarted on its port and SQLite file is the replica it was; one
// on another file, or on a port the system picks, is another.
func TestLocalReplicaIDNamesOneServeOfAHost(t *testing.T) {
	id := localReplicaID("127.0.0.1:8080", "bullpen.db")
	if id == "" || id != localReplicaID("127.0.0.1:8080", "bullpen.db") {
		t.Fatalf("localReplicaID = %q, then another", id)
	}
	abs, err := filepath.Abs("bullpen.db")
	if err != nil {
		t.Fatal(err)
	}
	if got := localReplicaID("127.0.0.1:8080", abs); got != id {
		t.Errorf("the store named by its absolute path gives %q, want %q", got, id)
	}
	for _, other := range [][2]string{{"127.0.0.1:8081", "bullpen.db"}, {"127.0.0.1:8080", "other.db"}} {
		if got := localReplicaID(other[0], other[1]); got == id || got == "" {
			t.Errorf("localReplicaID(%q, %q) = %q; want another name than %q", other[0], other[1], got, id)
		}
	}
	if got := localReplicaID("127.0.0.1:0", "bullpen.db"); got != "" {
		t.Errorf("with port 0: %q, want none (a random one)", got)
	}
}

// demo names each flag it cannot take, and refuses an argument, where it
// gave one message for all and ran with a stray argument.
func TestDemoNamesEveryBadFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--speed", "-1", "--duration", "0", "--interval", "0s", "--start", "today"},
			[]string{"--speed -1: want a number not below 0", "--duration 0s: want a positive duration",
				"--interval 0s: want a positive duration", `--start "today": want RFC 3339`}},
		{[]string{"--interval", "1ms"}, []string{"--interval 1ms: want at least 1s"}},
		{[]string{"--duration", "2m", "--roll-at", "20m"}, []string{"--roll-at 20m0s: want an offset within --duration 2m0s"}},
		{[]string{"extra"}, []string{`unexpected argument "extra"`}},
	} {
		var out, errb bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		if code := run(t.Context(), e, append([]string{"demo"}, tc.args...)); code != 2 {
			t.Errorf("demo %v: exit %d, want 2", tc.args, code)
		}
		for _, want := range tc.want {
			if !strings.Contains(errb.String(), want) {
				t.Errorf("demo %v: stderr lacks %q:\n%s", tc.args, want, errb.String())
			}
		}
	}
}

// bullpen version names the binary's version and the Go it was built with.
func TestVersion(t *testing.T) {
	code, out, errOut := runWithEnv(nil, "version")
	if code != 0 || !strings.HasPrefix(out, "bullpen (devel)") || !strings.HasSuffix(out, " "+runtime.Version()+"\n") {
		t.Fatalf("exit %d: %q %s", code, out, errOut)
	}
}

// A bad value that came from the environment is named by its variable too,
// since serve's problems name the flag.
func TestServeSaysWhichBadValuesCameFromTheEnvironment(t *testing.T) {
	vars := map[string]string{"BULLPEN_CLOUD": "gce", "BULLPEN_WEBHOOK_SECRET": "s", "BULLPEN_ADMIN_TOKEN": "test-admin-token"}
	code, _, errOut := runWithEnv(vars, "serve", "--config", "../../examples/runs-on.yml", "--github", "hub")
	if code != 78 || !strings.Contains(errOut, `--cloud "gce": want sim, local or aws`) || !strings.Contains(errOut, "(--cloud came from $BULLPEN_CLOUD)") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	if strings.Contains(errOut, "--github came from") {
		t.Fatalf("a flag given on the command line said to come from the environment:\n%s", errOut)
	}
}

// A start that no restart mends exits 78 (EX_CONFIG), which the systemd
// unit does not restart: autoscaling the converger cannot poll, agent
// settings that cannot work, a table or queue made by hand without what
// bullpen needs, a configuration file with none kept to start on. A
// source GitHub may answer next time, and any other failure, exit 1.
func TestServeStartStatusSaysWhetherARestartMayMendIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		config string
		want   int
	}{
		{"cadence", fmt.Errorf("with a converger cycle of 2m0s: %w", &autoscale.CadenceError{Problems: []string{"p"}}), "runs-on.yml", 78},
		{"agent settings", fmt.Errorf("local cloud: --local-agent-env: %w", agent.ErrBadSettings), "runs-on.yml", 78},
		{"table layout", fmt.Errorf("open store: %w", fmt.Errorf("dynamodb table t: %w: index x is missing", dynamodb.ErrTableLayout)), "runs-on.yml", 78},
		{"queue setup", fmt.Errorf("open queues: %w", errors.Join(errors.New("queue a: not found"),
			fmt.Errorf("sqs queue b: %w: DelaySeconds is 5 s", sqs.ErrQueueSetup))), "runs-on.yml", 78},
		{"a file with none kept", fmt.Errorf("%w: the store keeps none from runs-on.yml", app.ErrNoConfiguration), "runs-on.yml", 78},
		{"github with none kept", fmt.Errorf("%w: the store keeps none from github://o/r/p", app.ErrNoConfiguration), "github://o/r/p", 1},
		{"a store that does not answer", errors.New("open store: timeout"), "runs-on.yml", 1},
	} {
		if got := startStatus(tc.err, tc.config); got != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.want)
		}
	}
}

// serve -h says which exit statuses its unit restarts.
func TestServeHelpTellsItsExitStatuses(t *testing.T) {
	_, out, _ := runCmd(t, "serve", "-h")
	if said := strings.Join(strings.Fields(out), " "); !strings.Contains(said, "78 (EX_CONFIG) a start refused") ||
		!strings.Contains(said, "a github:// configuration that cannot be read") {
		t.Errorf("serve -h does not tell its exit statuses:\n%s", out)
	}
}

// Every variable a flag's usage names is the one that sets it, booleans'
// included ("($BULLPEN_CANCEL_REJECTED=true)"): serve does not call one
// it reads a variable that sets nothing, and counts a provider's flag
// its variable gives as given.
func TestServeKnowsTheVariableOfEveryFlag(t *testing.T) {
	vars := map[string]string{"BULLPEN_CANCEL_REJECTED": "true", "BULLPEN_AWS_NO_SPOT_FALLBACK": "true", "BULLPEN_WEBHOOK_SECRET": "s"}
	_, _, errs := runWithEnv(vars, "serve", "--listen", "127.0.0.1:0")
	for _, v := range []string{"BULLPEN_CANCEL_REJECTED", "BULLPEN_AWS_NO_SPOT_FALLBACK"} {
		if strings.Contains(errs, "variable="+v) {
			t.Errorf("serve calls $%s, which it reads, a variable that sets nothing:\n%s", v, errs)
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f := serveFlags{cloud: "sim", github: "sim"}
	f.define(fs, func(k string) string { return vars[k] })
	if got := unusedProviderFlags(&f, f.givenFlags(fs)); !slices.Equal(got, []string{"--aws-no-spot-fallback"}) {
		t.Errorf("unused provider flags %v, want --aws-no-spot-fallback, which its variable gives", got)
	}
	named := regexp.MustCompile(`\(\$(BULLPEN_[A-Z0-9_]+)(=[a-z]+)?\)`)
	fs.VisitAll(func(fl *flag.Flag) {
		want := ""
		if m := named.FindStringSubmatch(fl.Usage); m != nil {
			want = m[1]
		}
		if got := f.variables[fl.Name]; got != want {
			t.Errorf("--%s: set by $%s, its usage names $%s", fl.Name, got, want)
		}
	})
}

// serve checks autoscaling only for the pools its environment serves, at
// its own --converge-every: validate --environment checks the same pools,
// so that a dev pool needing a faster converger does not fail the file
// for the production stack. Without it every pool is checked.
func TestValidateChecksThePoolsOfTheEnvironmentGiven(t *testing.T) {
	path := writeFile(t, t.TempDir(), "environments.yml", smallRunnerOn("ubuntu24-full-x64")+`  fast:
    runner: small
    environment: dev
    schedule:
      - name: default
        hot: 1
    autoscale:
      poll-interval: 100s
  steady:
    runner: small
    environment: production
    schedule:
      - name: default
        hot: 1
`)
	if code, out, errs := runCmd(t, "validate", path); code != 1 || out != "" || !strings.Contains(errs, `pool "fast"`) {
		t.Errorf("every environment at 30s: exit %d, stdout %q, stderr:\n%s", code, out, errs)
	}
	code, out, errs := runCmd(t, "validate", path, "--environment", "production")
	if code != 0 || strings.Contains(out, "fast:") || !strings.Contains(out, "steady:") || !strings.Contains(out, "ok (1 runners, 1 pools in environment production)") {
		t.Errorf("--environment production: exit %d:\n%s%s", code, out, errs)
	}
	if code, out, errs := runWithEnv(map[string]string{"BULLPEN_ENVIRONMENT": "production"}, "validate", path); code != 0 {
		t.Errorf("$BULLPEN_ENVIRONMENT=production: exit %d:\n%s%s", code, out, errs)
	}
	if code, out, errs := runCmd(t, "validate", path, "--environment", "dev"); code != 1 || !strings.Contains(errs, `pool "fast"`) {
		t.Errorf("--environment dev at 30s: exit %d:\n%s%s", code, out, errs)
	}
	if code, out, errs := runCmd(t, "validate", path, "--environment", "dev", "--converge-every", "10s"); code != 0 || !strings.Contains(out, "fast:") {
		t.Errorf("--environment dev at 10s: exit %d:\n%s%s", code, out, errs)
	}
	code, out, errs = runCmd(t, "validate", path, "--environment", "staging")
	if code != 0 || !strings.Contains(errs, "warning: no pool names environment staging") || !strings.Contains(errs, "dev, production") ||
		!strings.Contains(out, "0 pools in environment staging") {
		t.Errorf("--environment staging: exit %d:\n%s%s", code, out, errs)
	}
}
