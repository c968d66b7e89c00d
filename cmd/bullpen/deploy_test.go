package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// systemdUnit is deploy/bullpen.service as systemd reads it and as the
// install steps in its comments lay out its files.
type systemdUnit struct {
	text string
	// exec is ExecStart's words, ${CREDENTIALS_DIRECTORY} kept.
	exec []string
	// credentials are the LoadCredential= lines: id → the file loaded.
	credentials map[string]string
	// modes are the files and directories the install steps make, with
	// their modes; dirs says which of them are directories.
	modes map[string]os.FileMode
	dirs  map[string]bool
	// comments are the comment lines, without their "#".
	comments []string
}

func readSystemdUnit(t *testing.T) systemdUnit {
	t.Helper()
	b, err := os.ReadFile("../../deploy/bullpen.service")
	if err != nil {
		t.Fatal(err)
	}
	u := systemdUnit{text: string(b), credentials: map[string]string{}, modes: map[string]os.FileMode{}, dirs: map[string]bool{}}
	for _, line := range strings.Split(strings.ReplaceAll(u.text, "\\\n", " "), "\n") {
		if c, ok := strings.CutPrefix(line, "#"); ok {
			u.comments = append(u.comments, c)
			u.install(t, strings.Fields(c))
			continue
		}
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			u.exec = strings.Fields(v)
		}
		if v, ok := strings.CutPrefix(line, "LoadCredential="); ok {
			id, path, _ := strings.Cut(v, ":")
			u.credentials[id] = path
		}
	}
	return u
}

// install records what one install step of the comments makes.
func (u *systemdUnit) install(t *testing.T, words []string) {
	t.Helper()
	if len(words) == 0 || words[0] != "install" {
		return
	}
	dir, mode := false, os.FileMode(0o755) // install's default mode
	var args []string
	for i := 1; i < len(words); i++ {
		switch w := words[i]; {
		case w == "-d":
			dir = true
		case w == "-m" && i+1 < len(words):
			m, err := strconv.ParseUint(words[i+1], 8, 32)
			if err != nil {
				t.Fatalf("install step %q: mode %q", strings.Join(words, " "), words[i+1])
			}
			mode = os.FileMode(m)
			i++
		case strings.HasPrefix(w, "<") || strings.HasPrefix(w, "#"):
			i = len(words) // a redirection or a comment ends the arguments
		default:
			args = append(args, w)
		}
	}
	if !dir {
		args = args[len(args)-1:] // the destination
	}
	for _, path := range args {
		u.modes[path], u.dirs[path] = mode, dir
	}
}

// flag is the value ExecStart gives the flag name, "" for none.
func (u systemdUnit) flag(name string) string {
	if i := slices.Index(u.exec, "--"+name); i >= 0 && i+1 < len(u.exec) {
		return u.exec[i+1]
	}
	return ""
}

// parseServeFlags parses args as serve's flags.
func parseServeFlags(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f serveFlags
	f.define(fs, func(string) string { return "" })
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%q is not a flag", fs.Arg(0))
	}
	return nil
}

// The unit restarts serve after any failure but a start it refused, which
// exits 78 (EX_CONFIG): no restart mends that. A crash, which Go ends with
// status 2, is restarted.
func TestSystemdUnitRestartsServeUnlessItRefusedToStart(t *testing.T) {
	u := readSystemdUnit(t)
	var final []string
	for _, line := range strings.Split(u.text, "\n") {
		if v, ok := strings.CutPrefix(line, "RestartPreventExitStatus="); ok {
			final = append(final, strings.Fields(v)...)
		}
	}
	if !slices.Equal(final, []string{"78"}) || !strings.Contains(u.text, "\nRestart=on-failure\n") {
		t.Errorf("the unit does not restart serve unless it exits 78: RestartPreventExitStatus %v", final)
	}
}

// The systemd unit starts serve with flags serve knows, and every secret
// comes from a systemd credential that ExecStart names.
func TestSystemdUnitStartsServeWithKnownFlags(t *testing.T) {
	u := readSystemdUnit(t)
	exec := strings.Join(u.exec, " ")
	if len(u.exec) < 2 || u.exec[0] != "/usr/local/bin/bullpen" || u.exec[1] != "serve" {
		t.Fatalf("ExecStart %q does not run bullpen serve", exec)
	}
	const credentials = "/run/credentials/bullpen.service"
	if err := parseServeFlags(strings.Fields(strings.ReplaceAll(exec, "${CREDENTIALS_DIRECTORY}", credentials))[2:]); err != nil {
		t.Fatalf("serve refuses the unit's flags %v: %v", u.exec[2:], err)
	}
	for _, cred := range []string{"webhook-secret", "admin-token", "viewer-token", "github-app-key"} {
		if u.credentials[cred] == "" || u.flag(cred+"-file") != "${CREDENTIALS_DIRECTORY}/"+cred {
			t.Errorf("the %s does not come from a systemd credential", cred)
		}
	}
	for _, w := range u.exec {
		if id, ok := strings.CutPrefix(w, "${CREDENTIALS_DIRECTORY}/"); ok && u.credentials[id] == "" {
			t.Errorf("ExecStart reads the credential %s, which no LoadCredential= line loads", id)
		}
	}
	// A token rather than an App: the lines the comments give instead.
	var token []string
	for _, c := range u.comments {
		c = strings.TrimSpace(c)
		if v, ok := strings.CutPrefix(c, "LoadCredential=github-token:"); ok && v != "" {
			token = append(token, "load")
		}
		if strings.HasPrefix(c, "--github-token-file ${CREDENTIALS_DIRECTORY}/github-token") {
			if err := parseServeFlags(append(strings.Fields(strings.ReplaceAll(c, "${CREDENTIALS_DIRECTORY}", credentials)), "--github", "token")); err != nil {
				t.Errorf("serve refuses the token's flag %q: %v", c, err)
			}
			token = append(token, "flag")
		}
	}
	if !slices.Equal(token, []string{"load", "flag"}) {
		t.Errorf("the comments do not say how a GitHub token comes as a credential (found %v)", token)
	}
}

// Installed as its comments say, the unit's dynamic user can read the
// configuration, which must stay a file (--reload reads it again; a
// credential is a copy made at start), while each secret is root's alone
// and reaches serve as a credential.
func TestSystemdUnitsInstallLetsItsDynamicUserReadTheConfiguration(t *testing.T) {
	u := readSystemdUnit(t)
	if !strings.Contains(u.text, "\nDynamicUser=yes\n") {
		t.Fatal("the unit no longer runs serve as a dynamic user: check what it can read")
	}
	config := u.flag("config")
	if !strings.HasPrefix(config, "/") {
		t.Fatalf("--config %q: want a file's absolute path", config)
	}
	mode, ok := u.modes[config]
	if !ok || u.dirs[config] {
		t.Fatalf("--config %s is not a file the install steps make", config)
	}
	if mode&0o004 == 0 {
		t.Errorf("the install steps make %s %04o: the dynamic user cannot read it", config, mode)
	}
	for dir := filepath.Dir(config); dir != "/"; dir = filepath.Dir(dir) {
		if m, made := u.modes[dir]; made && m&0o001 == 0 {
			t.Errorf("the install steps make %s %04o: the dynamic user cannot reach %s through it", dir, m, config)
		}
	}
	if _, made := u.modes[filepath.Dir(config)]; !made {
		t.Errorf("no install step makes %s, the configuration's directory", filepath.Dir(config))
	}
	for id, path := range u.credentials {
		switch m, made := u.modes[path]; {
		case !made:
			t.Errorf("no install step makes %s, which the credential %s loads: the unit would not start", path, id)
		case m&0o077 != 0:
			t.Errorf("the install steps make %s %04o: a secret should be root's alone", path, m)
		}
	}
}

// metricNames are the metric names the code registers, from its string
// literals.
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	lit := regexp.MustCompile(`"(bullpen_[a-z0-9_]+)"`)
	err := filepath.WalkDir("../../internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// The alert rules and the Grafana dashboard use only metrics bullpen has.
func TestDeployFilesUseMetricsThatExist(t *testing.T) {
	known := metricNames(t)
	used := regexp.MustCompile(`bullpen_[a-z0-9_]+`)
	for _, file := range []string{"prometheus/alerts.yml", "prometheus/alerts_test.yml", "grafana/bullpen.json"} {
		b, err := os.ReadFile("../../deploy/" + file)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, name := range used.FindAllString(string(b), -1) {
			base := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(name, "")
			if !known[name] && !known[base] {
				t.Errorf("%s uses %s, which no code registers", file, name)
			}
			seen++
		}
		if seen == 0 {
			t.Errorf("%s uses no bullpen metric", file)
		}
	}
}

// sharedGauge matches the gauges every replica exports alike, from the
// shared store (the dashboard's collector): summed over the instance
// label, they count each instance or job once per replica.
var (
	sharedGauge     = regexp.MustCompile(`bullpen_(pool_ready_instances|pool_target_instances|instances|jobs|job_oldest_queued_seconds)\{`)
	sharedGaugeOnce = regexp.MustCompile(`max by \([a-z, ]+\) \(bullpen_(pool_ready_instances|pool_target_instances|instances|jobs|job_oldest_queued_seconds)\{`)
)

func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/bullpen.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			GridPos struct{ H, W, X, Y int }
			Targets []struct {
				Expr       string `json:"expr"`
				Datasource struct{ UID string }
			}
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W == 0 {
			t.Errorf("panel %q does not fit the 24-column grid: %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if q.Expr == "" || q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: query %q on datasource %q", p.Title, q.Expr, q.Datasource.UID)
			}
			if sharedGauge.MatchString(q.Expr) && !sharedGaugeOnce.MatchString(q.Expr) {
				t.Errorf("panel %q: %q adds up what every replica exports alike; take the max over instances first", p.Title, q.Expr)
			}
		}
	}
	if dash.UID == "" || len(ids) < 10 {
		t.Errorf("dashboard uid %q with %d panels", dash.UID, len(ids))
	}
}
