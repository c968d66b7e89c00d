// Package testfixtures gives tests workflow_job deliveries: built in Go
// (Payload, GoSign) for the tests of bullpen's own behaviour, and GitHub's
// real artefacts (the npm packages under testdata/npm, installed by
// scripts/test, and GitHub's own signing code run under node) as an oracle
// that those are what GitHub sends. Without node or the npm packages, the
// oracle tests skip with the reason; under CI=true they fail instead.
package testfixtures

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// missing skips the test with how to install what it needs, or fails it
// under CI (CI=true), where everything must be there.
func missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; scripts/test installs it", what)
	}
	t.Skipf("skipped: %s (scripts/test installs it)", what)
}

// Root returns the repository root (the directory holding go.mod).
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testfixtures: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Modules returns testdata/npm/node_modules, failing the test with the way
// to install it when it is missing.
func Modules(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(Root(t), "testdata", "npm", "node_modules")
	if _, err := os.Stat(filepath.Join(dir, "@octokit", "webhooks-examples")); err != nil {
		missing(t, "the npm test fixtures are not installed (npm ci --prefix testdata/npm)")
	}
	return dir
}

// WorkflowJobExamples returns the real workflow_job payloads of
// @octokit/webhooks-examples, as raw JSON, in the package's order.
func WorkflowJobExamples(t testing.TB) []json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Modules(t), "@octokit", "webhooks-examples", "api.github.com", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var events []struct {
		Name     string            `json:"name"`
		Examples []json.RawMessage `json:"examples"`
	}
	if err := json.Unmarshal(b, &events); err != nil {
		t.Fatalf("webhooks-examples index: %v", err)
	}
	for _, e := range events {
		if e.Name == "workflow_job" {
			return e.Examples
		}
	}
	t.Fatal("webhooks-examples has no workflow_job examples")
	return nil
}

// SignAll returns the X-Hub-Signature-256 values for bodies, computed by
// @octokit/webhooks-methods (GitHub's own signing code) in one node
// process.
func SignAll(t testing.TB, secret string, bodies [][]byte) []string {
	t.Helper()
	modules := Modules(t)
	if _, err := exec.LookPath("node"); err != nil {
		missing(t, "node is not installed")
	}
	in, err := json.Marshal(struct {
		Secret string   `json:"secret"`
		Bodies []string `json:"bodies"`
	}{secret, toStrings(bodies)})
	if err != nil {
		t.Fatal(err)
	}
	const script = `
const { sign } = await import(process.env.METHODS);
let input = "";
for await (const chunk of process.stdin) input += chunk;
const { secret, bodies } = JSON.parse(input);
const out = [];
for (const b of bodies) out.push(await sign(secret, b));
process.stdout.write(JSON.stringify(out));
`
	cmd := exec.Command("node", "--input-type=module", "-e", script)
	cmd.Env = append(os.Environ(), "METHODS="+filepath.Join(modules, "@octokit", "webhooks-methods", "dist-node", "index.js"))
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + string(ee.Stderr)
		}
		t.Fatalf("sign with @octokit/webhooks-methods: %s", msg)
	}
	var sigs []string
	if err := json.Unmarshal(out, &sigs); err != nil || len(sigs) != len(bodies) {
		t.Fatalf("sign: unexpected output %q (%v)", out, err)
	}
	return sigs
}

func toStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// GoSign returns the X-Hub-Signature-256 value for body, computed with Go's
// own HMAC-SHA256 (SignAll checks it against GitHub's code).
func GoSign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Job describes a workflow_job delivery for Payload. Zero fields take the
// values a fresh queued job has.
type Job struct {
	Action string // queued (default), waiting, in_progress, completed
	// Status is workflow_job.status; the action's when empty. A job held
	// for an environment's approval comes queued with status waiting, then
	// waiting, and once approved queued again with status queued.
	Status     string
	ID, RunID  int64
	RunAttempt int
	Name       string
	Workflow   string
	Repo       string // owner/name; default acme/widgets
	Labels     []string
	RunnerID   int64
	RunnerName string
	Conclusion string
	Created    time.Time
	Started    time.Time
	Completed  time.Time
}

// Payload builds a workflow_job payload with the fields GitHub sends and
// bullpen reads, shaped as GitHub's (the webhook package's oracle test
// checks the real examples parse the same way).
func Payload(j Job) []byte {
	if j.Action == "" {
		j.Action = "queued"
	}
	if j.Repo == "" {
		j.Repo = "acme/widgets"
	}
	if j.Labels == nil {
		j.Labels = []string{"self-hosted"}
	}
	if j.Created.IsZero() {
		j.Created = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	}
	status := j.Status
	if status == "" {
		status = j.Action
	}
	ts := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t.UTC().Format(time.RFC3339)
	}
	orNil := func(v any, zero bool) any {
		if zero {
			return nil
		}
		return v
	}
	owner, _, _ := strings.Cut(j.Repo, "/")
	b, err := json.Marshal(map[string]any{
		"action": j.Action,
		"workflow_job": map[string]any{
			"id": j.ID, "run_id": j.RunID, "run_attempt": max(j.RunAttempt, 1),
			"run_url":       "https://api.github.com/repos/" + j.Repo + "/actions/runs/" + itoa(j.RunID),
			"html_url":      "https://github.com/" + j.Repo + "/actions/runs/" + itoa(j.RunID) + "/job/" + itoa(j.ID),
			"name":          orDefault(j.Name, "build"),
			"workflow_name": orDefault(j.Workflow, "CI"),
			"head_branch":   "main", "status": status,
			"conclusion":  orNil(j.Conclusion, j.Conclusion == ""),
			"labels":      j.Labels,
			"runner_id":   orNil(j.RunnerID, j.RunnerID == 0),
			"runner_name": orNil(j.RunnerName, j.RunnerName == ""),
			"created_at":  ts(j.Created), "started_at": ts(j.Started), "completed_at": ts(j.Completed),
			"steps": []any{},
		},
		"repository":   map[string]any{"id": 1296269, "full_name": j.Repo, "name": strings.TrimPrefix(j.Repo, owner+"/"), "private": false},
		"organization": map[string]any{"login": owner},
		"sender":       map[string]any{"login": "octocat", "type": "User"},
		"installation": map[string]any{"id": 42},
	})
	if err != nil {
		panic(err) // maps of plain values always marshal
	}
	return b
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
