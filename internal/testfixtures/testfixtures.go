// Package testfixtures finds the real GitHub artefacts that tests use (the
// npm packages under testdata/npm, installed by scripts/test) and runs
// GitHub's own signing code on them.
package testfixtures

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

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
		t.Fatalf("npm test fixtures are not installed: run scripts/test, or `npm ci --prefix testdata/npm` (%v)", err)
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

// Sign returns the X-Hub-Signature-256 value for body, computed by
// @octokit/webhooks-methods (GitHub's own signing code) under node.
func Sign(t testing.TB, secret string, body []byte) string {
	t.Helper()
	return SignAll(t, secret, [][]byte{body})[0]
}

// SignAll signs many bodies with one node process.
func SignAll(t testing.TB, secret string, bodies [][]byte) []string {
	t.Helper()
	modules := Modules(t)
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
