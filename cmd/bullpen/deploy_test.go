package main

import (
	"encoding/json"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The systemd unit starts serve with flags serve knows.
func TestSystemdUnitStartsServeWithKnownFlags(t *testing.T) {
	b, err := os.ReadFile("../../deploy/bullpen.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.ReplaceAll(string(b), "\\\n", " ")
	var exec string
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			exec = v
		}
	}
	args := strings.Fields(strings.ReplaceAll(exec, "${CREDENTIALS_DIRECTORY}", "/run/credentials/bullpen.service"))
	if len(args) < 2 || args[0] != "/usr/local/bin/bullpen" || args[1] != "serve" {
		t.Fatalf("ExecStart %q does not run bullpen serve", exec)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f serveFlags
	f.define(fs, func(string) string { return "" })
	if err := fs.Parse(args[2:]); err != nil || fs.NArg() != 0 {
		t.Fatalf("serve refuses the unit's flags %v: %v", args[2:], err)
	}
	for _, cred := range []string{"webhook-secret", "admin-token", "viewer-token"} {
		if !strings.Contains(unit, "LoadCredential="+cred+":") || !strings.Contains(exec, "${CREDENTIALS_DIRECTORY}/"+cred) {
			t.Errorf("the %s does not come from a systemd credential", cred)
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
