package fakegh_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
)

var epoch = time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("body %s: %v", a.body, err)
	}
	return m
}

// do sends one request; auth is the Authorization header, if any.
func do(t *testing.T, srv *fakegh.Server, method, path, body, auth string) answer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL()+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, b}
}

func newServer(t *testing.T) *fakegh.Server {
	srv := fakegh.New()
	t.Cleanup(srv.Close)
	return srv
}

func TestPaginationLinks(t *testing.T) {
	srv := newServer(t)
	for i := range 5 {
		srv.AddRunner(fakegh.RunnerSpec{Scope: domain.Scope{Owner: "acme"}, Name: fmt.Sprint("r", i), Labels: []string{"x"}})
	}
	srv.PageSize(2)
	tests := []struct {
		query     string
		ids       int
		rels      []string
		nextPage  string
		firstName string
	}{
		{"", 2, []string{"next", "last"}, "2", "r0"},
		{"?page=2&per_page=100", 2, []string{"prev", "next", "last", "first"}, "3", "r2"},
		{"?page=3", 1, []string{"prev", "first"}, "", "r4"},
		{"?page=9", 0, []string{"prev", "first"}, "", ""},
	}
	for _, tc := range tests {
		a := do(t, srv, "GET", "/orgs/acme/actions/runners"+tc.query, "", "")
		body := a.json(t)
		runners := body["runners"].([]any)
		if len(runners) != tc.ids || body["total_count"].(float64) != 5 {
			t.Errorf("%q: %d runners of %v, want %d of 5", tc.query, len(runners), body["total_count"], tc.ids)
		}
		if len(runners) > 0 && runners[0].(map[string]any)["name"] != tc.firstName {
			t.Errorf("%q: first runner %v, want %s", tc.query, runners[0].(map[string]any)["name"], tc.firstName)
		}
		link := a.header.Get("Link")
		for _, rel := range tc.rels {
			if !strings.Contains(link, `rel="`+rel+`"`) {
				t.Errorf("%q: Link %q lacks rel=%s", tc.query, link, rel)
			}
		}
		if tc.nextPage != "" && !strings.Contains(link, "page="+tc.nextPage+"&per_page=2>; rel=\"next\"") {
			t.Errorf("%q: Link %q does not point next to page %s", tc.query, link, tc.nextPage)
		}
		if !strings.HasPrefix(link, "<"+srv.URL()) && link != "" {
			t.Errorf("%q: Link %q is not absolute", tc.query, link)
		}
	}
}

func TestAuthentication(t *testing.T) {
	srv := newServer(t)
	srv.AddOrg("acme")
	if a := do(t, srv, "GET", "/orgs/acme/repos", "", ""); a.status != 200 {
		t.Errorf("without required credentials: %d, want 200", a.status)
	}
	srv.RequireToken("ghp_good")
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer ghp_bad", 401}, {"Bearer ghp_good", 200}, {"token ghp_good", 200}, {"Basic ghp_good", 401}} {
		a := do(t, srv, "GET", "/orgs/acme/repos", "", tc.auth)
		if a.status != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, a.status, tc.want)
		}
		if a.status == 401 && a.json(t)["message"] != "Bad credentials" {
			t.Errorf("401 body %s", a.body)
		}
	}
}

func TestAppInstallationTokens(t *testing.T) {
	srv := newServer(t)
	srv.AddOrg("acme")
	key, jwt := appKeyAndJWT(t, 4242)
	srv.RequireApp(4242, 77, &key.PublicKey)
	_, otherJWT := appKeyAndJWT(t, 4242)
	tests := []struct {
		name, path, auth string
		want             int
	}{
		{"good JWT", "/app/installations/77/access_tokens", "Bearer " + jwt, 201},
		{"another key", "/app/installations/77/access_tokens", "Bearer " + otherJWT, 401},
		{"another app", "/app/installations/77/access_tokens", "Bearer " + signJWT(t, key, 9, time.Now().Add(time.Minute)), 401},
		{"expired", "/app/installations/77/access_tokens", "Bearer " + signJWT(t, key, 4242, time.Now().Add(-time.Minute)), 401},
		{"not a JWT", "/app/installations/77/access_tokens", "Bearer abc", 401},
		{"another installation", "/app/installations/78/access_tokens", "Bearer " + jwt, 404},
	}
	for _, tc := range tests {
		if a := do(t, srv, "POST", tc.path, "", tc.auth); a.status != tc.want {
			t.Errorf("%s: %d, want %d: %s", tc.name, a.status, tc.want, a.body)
		}
	}
	if n := srv.TokenRequests(); n != 1 {
		t.Errorf("%d tokens issued, want 1", n)
	}
	a := do(t, srv, "POST", "/app/installations/77/access_tokens", "", "Bearer "+jwt)
	token, _ := a.json(t)["token"].(string)
	if !strings.HasPrefix(token, "ghs_") {
		t.Fatalf("installation token %q", token)
	}
	if got := do(t, srv, "GET", "/orgs/acme/repos", "", "token "+token).status; got != 200 {
		t.Errorf("with the installation token: %d, want 200", got)
	}
	if got := do(t, srv, "GET", "/orgs/acme/repos", "", "Bearer "+jwt).status; got != 401 {
		t.Errorf("with the JWT itself: %d, want 401", got)
	}
}

func TestRateLimit(t *testing.T) {
	srv := newServer(t)
	clk := clock.NewVirtual(epoch)
	srv.SetClock(clk)
	srv.AddOrg("acme")
	reset := epoch.Add(10 * time.Minute)
	srv.RateLimit(reset)
	a := do(t, srv, "GET", "/orgs/acme/repos", "", "")
	if a.status != 403 || a.header.Get("x-ratelimit-remaining") != "0" ||
		a.header.Get("x-ratelimit-reset") != strconv.FormatInt(reset.Unix(), 10) {
		t.Errorf("under the limit: %d remaining %q reset %q", a.status, a.header.Get("x-ratelimit-remaining"), a.header.Get("x-ratelimit-reset"))
	}
	clk.Advance(10 * time.Minute)
	a = do(t, srv, "GET", "/orgs/acme/repos", "", "")
	if a.status != 200 || a.header.Get("x-ratelimit-remaining") == "0" {
		t.Errorf("after the reset: %d remaining %q", a.status, a.header.Get("x-ratelimit-remaining"))
	}
}

func TestFailNext(t *testing.T) {
	srv := newServer(t)
	srv.AddRepo("acme/app")
	runs := "/repos/acme/app/actions/runs"
	tests := []struct {
		pattern string
		status  int
		path    string
	}{
		{"GET /repos/{owner}/{repo}/actions/runs", 500, runs},
		{"/repos/{owner}/{repo}/actions/runs", 502, runs},
		{"/repos/acme/*/actions/runs", 503, runs},
		{"GET /repos/acme/app/actions/runs", 429, runs},
		{"GET /orgs/acme/repos", 403, "/orgs/acme/repos"},
	}
	for _, tc := range tests {
		srv.FailNext(tc.pattern, tc.status, 1)
		a := do(t, srv, "GET", tc.path, "", "")
		if a.status != tc.status {
			t.Errorf("%s: %d, want %d", tc.pattern, a.status, tc.status)
		}
		if a.json(t)["message"] == "" {
			t.Errorf("%s: no message in %s", tc.pattern, a.body)
		}
		if retry := a.header.Get("retry-after"); (tc.status == 429) != (retry != "") {
			t.Errorf("%s: retry-after %q", tc.pattern, retry)
		}
		if tc.status == 403 && a.header.Get("x-ratelimit-remaining") == "0" {
			t.Errorf("an injected 403 looks like a rate limit")
		}
		if a := do(t, srv, "GET", tc.path, "", ""); a.status != 200 {
			t.Errorf("%s: the failure outlived its count: %d", tc.pattern, a.status)
		}
	}
	if n := srv.Count("GET /repos/{owner}/{repo}/actions/runs"); n != 8 {
		t.Errorf("Count = %d, want 8", n)
	}
}

// A secondary limit that names no time has no retry-after, but the primary
// limit's headers with calls left and a reset up to an hour away, as
// GitHub's sometimes do: a client must not take that reset for its wait.
func TestSecondaryLimitWithoutRetryAfter(t *testing.T) {
	srv := newServer(t)
	srv.AddRepo("acme/app")
	srv.SecondaryRetryAfter(0)
	srv.FailNext("GET /repos/{owner}/{repo}/actions/runs", 429, 1)
	a := do(t, srv, "GET", "/repos/acme/app/actions/runs", "", "")
	if a.status != 429 || a.header.Get("retry-after") != "" {
		t.Errorf("secondary limit: %d, retry-after %q; want 429 without retry-after", a.status, a.header.Get("retry-after"))
	}
	if rem := a.header.Get("x-ratelimit-remaining"); rem == "" || rem == "0" || a.header.Get("x-ratelimit-reset") == "" {
		t.Errorf("secondary limit: remaining %q reset %q; want calls left and a reset", rem, a.header.Get("x-ratelimit-reset"))
	}
	if msg, _ := a.json(t)["message"].(string); !strings.Contains(msg, "secondary rate limit") {
		t.Errorf("secondary limit message %q", msg)
	}
}

func TestRunners(t *testing.T) {
	srv := newServer(t)
	srv.AddRepo("acme/app")
	jit := `{"name":"r1","runner_group_id":1,"labels":["linux"]}`
	a := do(t, srv, "POST", "/orgs/acme/actions/runners/generate-jitconfig", jit, "")
	if a.status != 201 {
		t.Fatalf("JIT: %d %s", a.status, a.body)
	}
	cfg := a.json(t)["encoded_jit_config"].(string)
	if raw, err := base64.StdEncoding.DecodeString(cfg); err != nil || !json.Valid(raw) {
		t.Errorf("JIT config is not base64 of JSON: %v", err)
	}
	runnerID := int64(a.json(t)["runner"].(map[string]any)["id"].(float64))
	tests := []struct {
		name, method, path, body string
		want                     int
	}{
		{"name taken", "POST", "/orgs/acme/actions/runners/generate-jitconfig", jit, 409},
		{"same name in a repository", "POST", "/repos/acme/app/actions/runners/generate-jitconfig", jit, 201},
		{"no labels", "POST", "/orgs/acme/actions/runners/generate-jitconfig", `{"name":"r2","runner_group_id":1,"labels":[]}`, 422},
		{"unknown org", "POST", "/orgs/nobody/actions/runners/generate-jitconfig", jit, 404},
		{"unknown repository", "GET", "/repos/acme/nothing/actions/runners", "", 404},
		{"delete in the wrong scope", "DELETE", fmt.Sprintf("/repos/acme/app/actions/runners/%d", runnerID), "", 404},
	}
	for _, tc := range tests {
		if a := do(t, srv, tc.method, tc.path, tc.body, ""); a.status != tc.want {
			t.Errorf("%s: %d, want %d: %s", tc.name, a.status, tc.want, a.body)
		}
	}
	job := srv.QueueJob("acme/app", []string{"linux"})
	if got, err := srv.RunJIT(cfg); err != nil || got != job.ID {
		t.Fatalf("RunJIT took job %d (%v), want %d", got, err, job.ID)
	}
	if _, err := srv.RunJIT(cfg); err == nil {
		t.Errorf("a JIT config worked twice")
	}
	del := fmt.Sprintf("/orgs/acme/actions/runners/%d", runnerID)
	if a := do(t, srv, "DELETE", del, "", ""); a.status != 422 {
		t.Errorf("deleting a busy runner: %d, want 422", a.status)
	}
	if err := srv.CompleteJob(job.ID, "success"); err != nil {
		t.Fatal(err)
	}
	if a := do(t, srv, "DELETE", del, "", ""); a.status != 404 {
		t.Errorf("an ephemeral runner outlived its job: delete answered %d, want 404", a.status)
	}
}

func TestRunsAndCancel(t *testing.T) {
	srv := newServer(t)
	srv.AddRepo("acme/web")
	queued := srv.QueueJob("acme/app", []string{"linux"})
	started := srv.QueueJob("acme/app", []string{"linux"})
	waiting := srv.QueueJob("acme/app", []string{"linux"}, fakegh.InRun(started.RunID))
	if err := srv.StartJob(started.ID, "outsider-1"); err != nil {
		t.Fatal(err)
	}
	for status, want := range map[string]int64{"queued": queued.RunID, "in_progress": started.RunID} {
		runs := do(t, srv, "GET", "/repos/acme/app/actions/runs?status="+status, "", "").json(t)["workflow_runs"].([]any)
		if len(runs) != 1 || int64(runs[0].(map[string]any)["id"].(float64)) != want {
			t.Errorf("runs %s: %d runs, want run %d", status, len(runs), want)
		}
	}
	cancel := fmt.Sprintf("/repos/acme/app/actions/runs/%d/cancel", started.RunID)
	if a := do(t, srv, "POST", cancel, "", ""); a.status != 202 {
		t.Fatalf("cancel: %d", a.status)
	}
	for _, id := range []int64{started.ID, waiting.ID} {
		if j, _ := srv.Job(id); j.Status != "completed" || j.Conclusion != "cancelled" {
			t.Errorf("job %d is %s/%s after the cancel", id, j.Status, j.Conclusion)
		}
	}
	if a := do(t, srv, "POST", cancel, "", ""); a.status != 409 {
		t.Errorf("cancelling a completed run: %d, want 409", a.status)
	}
	if a := do(t, srv, "GET", fmt.Sprintf("/repos/acme/web/actions/jobs/%d", queued.ID), "", ""); a.status != 404 {
		t.Errorf("a job read through another repository: %d, want 404", a.status)
	}
}
