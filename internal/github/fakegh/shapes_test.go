package fakegh_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
)

// The OpenAPI description of GitHub's REST API, from the npm package
// @octokit/openapi (under testdata/npm, or where BULLPEN_OPENAPI says). When
// it is installed,
// the fake's answers are checked against its examples and schemas, and
// testdata/openapi-shapes.txt against its examples; without it, against
// testdata/openapi-shapes.txt alone.
var (
	specPath     = envOr("BULLPEN_OPENAPI", "../../../testdata/npm/node_modules/@octokit/openapi/generated/api.github.com.json")
	ghecSpecPath = envOr("BULLPEN_OPENAPI_GHEC", "../../../testdata/npm/node_modules/@octokit/openapi/generated/ghec.json")
	update       = flag.Bool("update", false, "rewrite testdata/openapi-shapes.txt from the OpenAPI description")
)

const shapesFile = "testdata/openapi-shapes.txt"

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// endpoint is one answer of the fake to check: the spec's operation and
// status, and the request that makes the fake give it.
type endpoint struct {
	method, route, status string
	path, body            string
	// ignore are example fields that echo the example's request rather
	// than the schema (an installation token's permissions and
	// repositories depend on what was asked).
	ignore []string
	asApp  bool // authenticated by the App's JWT
	// empty: GitHub's answer is its empty-object schema, whose example is
	// null: the fake's must be {}.
	empty bool
}

func (e endpoint) key() string { return e.method + " " + e.route + " " + e.status }

// TestShapes checks that the fake answers with the field names, nesting
// and JSON types of GitHub's examples (and, with the description at hand,
// every field its schemas require).
func TestShapes(t *testing.T) {
	srv, endpoints, auth := shapesFixture(t)
	spec := loadSpecs(t)
	var want map[string][]shapeLine
	switch {
	case spec != nil:
		want = specShapes(t, spec, endpoints)
		if *update {
			writeShapes(t, endpoints, want)
		}
		if stored := readShapes(t); !equalShapes(stored, want) {
			t.Errorf("%s differs from the OpenAPI description's examples; rerun with -update", shapesFile)
		}
	case *update:
		t.Fatalf("-update needs the OpenAPI descriptions at %s and %s", specPath, ghecSpecPath)
	default:
		t.Logf("no OpenAPI descriptions at %s and %s: checking against %s", specPath, ghecSpecPath, shapesFile)
		want = readShapes(t)
	}
	for _, e := range endpoints {
		t.Run(e.method+" "+e.route, func(t *testing.T) {
			got := call(t, srv, e, auth)
			lines := want[e.key()]
			switch {
			case e.empty && strings.TrimSpace(string(got)) != "{}":
				t.Errorf("answer %s, want {}", got)
			case len(lines) == 0 && !e.empty:
				t.Fatalf("no shape for %s", e.key())
			}
			for _, problem := range compareShape(got, lines, e.ignore) {
				t.Error(problem)
			}
			if spec != nil {
				for _, problem := range checkRequired(spec.of(e), e, got) {
					t.Error(problem)
				}
			}
		})
	}
}

// shapesFixture seeds a fake with a queued, an in-progress and a completed
// job, a JIT runner and an organisation runner, and returns the requests
// that show each endpoint's answer.
func shapesFixture(t *testing.T) (*fakegh.Server, []endpoint, string) {
	srv := fakegh.New()
	t.Cleanup(srv.Close)
	key, jwt := appKeyAndJWT(t, 4242)
	srv.RequireApp(4242, 77, &key.PublicKey)
	srv.AddInstallation(78, "octo-org")
	srv.RequireToken("ghp_shapes")
	const repo = "octo-org/octo-repo"
	srv.AddRepo(repo)
	srv.QueueJob(repo, []string{"linux"}, fakegh.Named("test"))
	done := srv.QueueJob(repo, []string{"linux"}, fakegh.Named("lint"))
	if err := srv.StartJob(done.ID, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if err := srv.CompleteJob(done.ID, "success"); err != nil {
		t.Fatal(err)
	}
	srv.AddRunner(fakegh.RunnerSpec{Scope: domain.Scope{Owner: "octo-org"}, Name: "org-runner", Labels: []string{"gpu"}, Online: true})
	srv.AddEnterprise("octo-enterprise", "octo-org")
	srv.AddEnterpriseRunnerGroup("octo-enterprise", "gpu")

	jit := endpoint{method: "POST", route: "/repos/{owner}/{repo}/actions/runners/generate-jitconfig", status: "201",
		path: "/repos/" + repo + "/actions/runners/generate-jitconfig", body: `{"name":"r1","runner_group_id":1,"labels":["linux"]}`}
	var reg struct {
		Config string `json:"encoded_jit_config"`
	}
	if err := json.Unmarshal(call(t, srv, jit, "Bearer ghp_shapes"), &reg); err != nil {
		t.Fatal(err)
	}
	running, err := srv.RunJIT(reg.Config)
	if err != nil || running == 0 {
		t.Fatalf("RunJIT: job %d, %v", running, err)
	}
	j, _ := srv.Job(running)
	jit.body = `{"name":"r2","runner_group_id":1,"labels":["linux"]}`
	return srv, []endpoint{
		jit,
		{method: "POST", route: "/orgs/{org}/actions/runners/generate-jitconfig", status: "201",
			path: "/orgs/octo-org/actions/runners/generate-jitconfig", body: `{"name":"r3","runner_group_id":1,"labels":["x64"]}`},
		{method: "GET", route: "/repos/{owner}/{repo}/actions/runners", status: "200", path: "/repos/" + repo + "/actions/runners"},
		{method: "GET", route: "/orgs/{org}/actions/runners", status: "200", path: "/orgs/octo-org/actions/runners"},
		{method: "GET", route: "/repos/{owner}/{repo}/actions/runs", status: "200", path: "/repos/" + repo + "/actions/runs"},
		{method: "GET", route: "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs", status: "200",
			path: fmt.Sprintf("/repos/%s/actions/runs/%d/jobs", repo, j.RunID)},
		{method: "GET", route: "/repos/{owner}/{repo}/actions/jobs/{job_id}", status: "200",
			path: fmt.Sprintf("/repos/%s/actions/jobs/%d", repo, running)},
		{method: "GET", route: "/orgs/{org}/repos", status: "200", path: "/orgs/octo-org/repos"},
		{method: "GET", route: "/orgs/{org}/actions/runner-groups", status: "200", path: "/orgs/octo-org/actions/runner-groups",
			ignore: []string{"runner_groups[].selected_"}},
		{method: "POST", route: "/enterprises/{enterprise}/actions/runners/generate-jitconfig", status: "201",
			path: "/enterprises/octo-enterprise/actions/runners/generate-jitconfig", body: `{"name":"r4","runner_group_id":1,"labels":["x64"]}`},
		{method: "GET", route: "/enterprises/{enterprise}/actions/runners", status: "200", path: "/enterprises/octo-enterprise/actions/runners"},
		{method: "GET", route: "/enterprises/{enterprise}/actions/runner-groups", status: "200", path: "/enterprises/octo-enterprise/actions/runner-groups",
			ignore: []string{"runner_groups[].selected_"}},
		{method: "POST", route: "/app/installations/{installation_id}/access_tokens", status: "201",
			path: "/app/installations/77/access_tokens", ignore: []string{"permissions.", "repositories"}},
		{method: "GET", route: "/app", status: "200", path: "/app", ignore: []string{"permissions."}, asApp: true},
		{method: "GET", route: "/orgs/{org}/installation", status: "200", path: "/orgs/octo-org/installation",
			ignore: []string{"permissions.", "events[]", "single_file_paths[]"}, asApp: true},
		{method: "GET", route: "/repos/{owner}/{repo}/installation", status: "200", path: "/repos/" + repo + "/installation",
			ignore: []string{"permissions.", "events[]", "single_file_paths[]"}, asApp: true},
		// Last: the re-run queues a job in the completed run.
		{method: "POST", route: "/repos/{owner}/{repo}/actions/jobs/{job_id}/rerun", status: "201",
			path: fmt.Sprintf("/repos/%s/actions/jobs/%d/rerun", repo, done.ID), empty: true},
	}, "Bearer " + jwt
}

// call makes e's request and returns the body, failing unless the status
// is e's.
func call(t *testing.T, srv *fakegh.Server, e endpoint, auth string) []byte {
	t.Helper()
	if !e.asApp && !strings.HasPrefix(e.route, "/app/") {
		auth = "Bearer ghp_shapes"
	}
	a := do(t, srv, e.method, e.path, e.body, auth)
	if fmt.Sprint(a.status) != e.status {
		t.Fatalf("%s %s: status %d, want %s: %s", e.method, e.path, a.status, e.status, a.body)
	}
	return a.body
}

// shapeLine is one field of an example: its path ("jobs[].labels[]") and
// JSON type.
type shapeLine struct{ path, typ string }

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	default:
		return "number"
	}
}

// flatten lists an example's fields; an array stands for its first element.
func flatten(v any, path string, out *[]shapeLine) {
	if path != "" {
		*out = append(*out, shapeLine{path, jsonType(v)})
	}
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			flatten(x[k], strings.TrimPrefix(path+"."+k, "."), out)
		}
	case []any:
		if len(x) > 0 {
			flatten(x[0], path+"[]", out)
		}
	}
}

// compareShape checks that every field of the shape is in the body, in
// every element of the arrays on its path, with the same JSON type (null
// matches any type: nullability is the schema's business).
func compareShape(body []byte, lines []shapeLine, ignore []string) []string {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return []string{fmt.Sprintf("body is not JSON: %v", err)}
	}
	var problems []string
	for _, l := range lines {
		if slices.ContainsFunc(ignore, func(p string) bool { return strings.HasPrefix(l.path, p) }) {
			continue
		}
		segs := strings.Split(strings.ReplaceAll(l.path, "[]", ".[]"), ".")
		walk(v, segs, "", func(at string, x any, ok bool) {
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: missing (want %s)", at, l.typ))
			case x != nil && l.typ != "null" && jsonType(x) != l.typ:
				problems = append(problems, fmt.Sprintf("%s: %s, want %s", at, jsonType(x), l.typ))
			}
		})
	}
	return problems
}

// walk calls visit with each value at segs below v ("[]" expands every
// element), or with ok false where a key is missing. A null on the way
// holds nothing to check.
func walk(v any, segs []string, at string, visit func(at string, x any, ok bool)) {
	if len(segs) == 0 {
		visit(at, v, true)
		return
	}
	if v == nil {
		return
	}
	seg := segs[0]
	if seg == "" {
		walk(v, segs[1:], at, visit)
		return
	}
	if seg == "[]" {
		for i, e := range asArray(v) {
			walk(e, segs[1:], fmt.Sprintf("%s[%d]", at, i), visit)
		}
		return
	}
	m, _ := v.(map[string]any)
	x, ok := m[seg]
	if !ok {
		visit(strings.TrimPrefix(at+"."+seg, "."), nil, false)
		return
	}
	walk(x, segs[1:], strings.TrimPrefix(at+"."+seg, "."), visit)
}

func asArray(v any) []any {
	a, _ := v.([]any)
	return a
}

func readShapes(t *testing.T) map[string][]shapeLine {
	t.Helper()
	b, err := os.ReadFile(shapesFile)
	if err != nil {
		t.Fatalf("read shapes: %v", err)
	}
	out := map[string][]shapeLine{}
	var key string
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "", strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "== "):
			key = strings.TrimPrefix(line, "== ")
			out[key] = nil // an empty answer has no lines
		default:
			path, typ, _ := strings.Cut(line, " ")
			out[key] = append(out[key], shapeLine{path, typ})
		}
	}
	return out
}

func writeShapes(t *testing.T, endpoints []endpoint, shapes map[string][]shapeLine) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("# Field paths and JSON types of the examples in GitHub's OpenAPI description\n")
	b.WriteString("# (@octokit/openapi, generated/api.github.com.json, and ghec.json for the enterprise\n")
	b.WriteString("# routes) for the answers fakegh gives.\n")
	b.WriteString("# Regenerate: go test ./internal/github/fakegh -run TestShapes -update\n")
	for _, e := range endpoints {
		fmt.Fprintf(&b, "\n== %s\n", e.key())
		for _, l := range shapes[e.key()] {
			fmt.Fprintf(&b, "%s %s\n", l.path, l.typ)
		}
	}
	if err := os.WriteFile(shapesFile, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func equalShapes(a, b map[string][]shapeLine) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
