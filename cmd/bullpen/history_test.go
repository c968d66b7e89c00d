package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/history"
)

// runWithEnv runs the entry point in-process with these environment
// variables.
func runWithEnv(vars map[string]string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] },
		environ: func() []string {
			var kv []string
			for k, v := range vars {
				kv = append(kv, k+"="+v)
			}
			return kv
		}}
	return run(context.Background(), e, args), out.String(), errb.String()
}

// history export writes a repository's completed jobs to a file, and a
// second run resumes it without reading again the runs in the file or
// writing any job twice; a file with a bad line
// is refused with the line named; the token never shows.
func TestHistoryExport(t *testing.T) {
	gh := fakegh.New()
	t.Cleanup(gh.Close)
	const token = "ghp_exportTokenNeverShown"
	gh.RequireToken(token)
	for range 3 {
		j := gh.QueueJob("acme/app", []string{"linux"})
		if err := gh.StartJob(j.ID, "r"); err != nil {
			t.Fatal(err)
		}
		if err := gh.CompleteJob(j.ID, "success"); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "history.jsonl")
	vars := map[string]string{"BULLPEN_GITHUB_TOKEN": token}
	args := []string{"history", "export", "--repo", "acme/app", "--since", "1d", "--out", out, "--github-url", gh.URL() + "/"}
	code, _, errOut := runWithEnv(vars, args...)
	if code != 0 || !strings.Contains(errOut, "3 written") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	read := gh.Count("GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs")
	code, _, errOut = runWithEnv(vars, args...)
	if code != 0 || !strings.Contains(errOut, "0 written, 3 already in the file") {
		t.Fatalf("resumed: exit %d: %s", code, errOut)
	}
	// The runs in the file are not read again: the budget goes to the others.
	if n := gh.Count("GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs") - read; n != 0 || !strings.Contains(errOut, "3 runs (3 already exported, not read again") {
		t.Fatalf("resumed: the jobs of %d runs read again: %s", n, errOut)
	}
	f, _ := os.Open(out)
	jobs, err := history.Read(out, f)
	f.Close()
	if err != nil || len(jobs) != 3 {
		t.Fatalf("%d jobs in the file (%v), want 3", len(jobs), err)
	}
	if err := os.WriteFile(out, append(mustRead(t, out), []byte("{oops\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runWithEnv(vars, args...)
	if code != 1 || !strings.Contains(errOut, out+":4: not a job") {
		t.Fatalf("a bad line: exit %d: %s", code, errOut)
	}
	code, _, errOut = runWithEnv(map[string]string{"BULLPEN_GITHUB_TOKEN": "ghp_wrong"}, "history", "export", "--repo", "acme/app", "--github-url", gh.URL()+"/")
	if code != 1 || strings.Contains(errOut, "ghp_wrong") || !strings.Contains(errOut, "acme/app") {
		t.Fatalf("a bad token: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runWithEnv(nil, "history", "export", "--repo", "acme/app"); code != 2 || !strings.Contains(errOut, "no token") {
		t.Fatalf("no token: exit %d: %s", code, errOut)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The history a fake GitHub holds, exported, replays through simulate: its
// report puts the simulated queue times next to the recorded ones, and
// names the labels no pool serves.
func TestSimulateAnExportedHistory(t *testing.T) {
	gh := fakegh.New()
	t.Cleanup(gh.Close)
	const token = "ghp_simulateToken"
	gh.RequireToken(token)
	for i, labels := range [][]string{{"runs-on=1/pool=small-x64/env=dev"}, {"runs-on=2/pool=small-x64/env=dev"}, {"runs-on=3/pool=medium-x64/env=dev"}, {"runs-on=4/pool=nowhere/env=dev"}} {
		j := gh.QueueJob("acme/app", labels, fakegh.Named(fmt.Sprint("job-", i)))
		if err := gh.StartJob(j.ID, "r"); err != nil {
			t.Fatal(err)
		}
		if err := gh.CompleteJob(j.ID, "success"); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "history.jsonl")
	code, _, errOut := runWithEnv(map[string]string{"BULLPEN_GITHUB_TOKEN": token},
		"history", "export", "--repo", "acme/app", "--out", out, "--github-url", gh.URL()+"/")
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, errOut)
	}
	code, report, errOut := runWithEnv(nil, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", out)
	if code != 0 {
		t.Fatalf("simulate: exit %d: %s", code, errOut)
	}
	wantAll(t, "the report", report, "4 jobs from", "4 replayed", "recorded", "simulated", "pool small-x64", "1 × runs-on=<run>/pool=nowhere/env=dev", "cloud calls:")
	code, js, _ := runWithEnv(nil, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", out, "--json")
	var rep struct {
		Replayed  int
		Simulated struct {
			ByStatus map[string]int `json:"by_status"`
		}
	}
	if code != 0 || json.Unmarshal([]byte(js), &rep) != nil || rep.Replayed != 4 || rep.Simulated.ByStatus["completed"] != 3 {
		t.Fatalf("json: exit %d, %+v\n%s", code, rep, js)
	}
	code, both, errOut := runWithEnv(nil, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", out, "--compare", "../../examples/runs-on.yml")
	if code != 0 || !strings.Contains(both, "4 jobs replayed through ../../examples/runs-on.yml (A) and ../../examples/runs-on.yml (B)") || !strings.Contains(both, "B-A") {
		t.Fatalf("compare: exit %d: %s\n%s", code, errOut, both)
	}
	// A job's cost is cents or less: it shows to a hundredth of a cent.
	if !regexp.MustCompile(`per completed job +[0-9]+\.[0-9]{4} +[0-9]+\.[0-9]{4} +\+[0-9]+\.[0-9]{4}\n`).MatchString(both) {
		t.Fatalf("compare: a job's cost is not shown to four decimals:\n%s", both)
	}
	if code, _, errOut := runWithEnv(nil, "simulate", "--config", "../../examples/runs-on.yml", "--jobs", "history_test.go"); code != 1 || !strings.Contains(errOut, "history_test.go:1: not a job") {
		t.Fatalf("a file that is no history: exit %d: %s", code, errOut)
	}
}

// history generate labels its jobs for the environment whose stack is to
// take them: with --config, the one simulate serves and its pools; a pool
// that stack does not serve is refused by name.
func TestHistoryGenerateLabelsJobsForTheEnvironment(t *testing.T) {
	labelsOf := func(args ...string) []string {
		t.Helper()
		code, out, errOut := runWithEnv(nil, append([]string{"history", "generate", "--jobs", "30", "--days", "0.1"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		var labels []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var j history.Job
			if err := json.Unmarshal([]byte(line), &j); err != nil || len(j.Labels) != 1 {
				t.Fatalf("%v: %q: %v", args, line, err)
			}
			labels = append(labels, j.Labels[0])
		}
		return labels
	}
	pools := map[string]bool{}
	for _, l := range labelsOf("--config", "../../examples/runs-on.yml") {
		if !strings.HasSuffix(l, "/env=dev") {
			t.Fatalf("a job of the example's dev stack labelled %q", l)
		}
		pools[strings.TrimSuffix(l[strings.Index(l, "pool="):], "/env=dev")] = true
	}
	if !pools["pool=small-x64"] || len(pools) < 2 {
		t.Errorf("the jobs ask for %v: want the dev stack's pools, small-x64 the busiest", pools)
	}
	for args, env := range map[string]string{
		"--config ../../examples/runs-on.yml --environment production": "",
		"--pools small-x64 --environment dev":                          "/env=dev",
		"--pools small-x64":                                            "",
	} {
		for _, l := range labelsOf(strings.Fields(args)...) {
			if !strings.HasSuffix(l, env) || (env == "" && strings.Contains(l, "env=")) {
				t.Fatalf("%s: a job labelled %q", args, l)
			}
		}
	}
	for args, want := range map[string]string{
		"--config ../../examples/runs-on.yml --pools nowhere":                            `the configuration has no pool "nowhere"`,
		"--config ../../examples/runs-on.yml --environment production --pools small-x64": "pool small-x64 belongs to environment dev, not production",
	} {
		code, _, errOut := runWithEnv(nil, append([]string{"history", "generate"}, strings.Fields(args)...)...)
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d: %s", args, code, errOut)
		}
	}
}

// A job a history cannot hold (here one that ran without labels) is not
// written, so that the file stays readable: the summary counts it and
// names the last one.
func TestHistoryExportSaysWhatItLeftOut(t *testing.T) {
	gh := fakegh.New()
	t.Cleanup(gh.Close)
	for _, labels := range [][]string{{"linux"}, {}} {
		j := gh.QueueJob("acme/app", labels)
		if err := gh.StartJob(j.ID, "r"); err != nil {
			t.Fatal(err)
		}
		if err := gh.CompleteJob(j.ID, "success"); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "history.jsonl")
	code, _, errOut := runWithEnv(map[string]string{"BULLPEN_GITHUB_TOKEN": "t"},
		"history", "export", "--repo", "acme/app", "--since", "1d", "--out", out, "--github-url", gh.URL()+"/")
	if code != 0 || !strings.Contains(errOut, "1 written") || !strings.Contains(errOut, "1 not written") ||
		!strings.Contains(errOut, "the last job not written:") || !strings.Contains(errOut, "no labels") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	f, _ := os.Open(out)
	defer f.Close()
	if jobs, err := history.Read(out, f); err != nil || len(jobs) != 1 {
		t.Fatalf("the file written: %d jobs, %v; want the one a history holds", len(jobs), err)
	}
}
