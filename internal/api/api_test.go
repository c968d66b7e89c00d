package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

var paths = []string{"/api/v1/jobs", "/api/v1/jobs/102", "/api/v1/instances?all=1", "/api/v1/pools", "/api/v1/nowhere"}

func TestRequestsWithoutTheAdminTokenAreRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cases := map[string]string{
		"no header":               "",
		"wrong token":             "Bearer admin-7f3c9e21d4b8a651",
		"wrong token, other size": "Bearer x",
		"token prefix":            "Bearer " + adminToken[:len(adminToken)-1],
		"token with a suffix":     "Bearer " + adminToken + "0",
		"basic scheme":            "Basic " + adminToken,
		"no scheme":               adminToken,
		"empty bearer":            "Bearer ",
	}
	for name, auth := range cases {
		for _, p := range paths {
			rec := r.getAs(p, auth)
			if got := rec.Header().Get("WWW-Authenticate"); got != `Bearer realm="bullpen"` {
				t.Errorf("%s, %s: WWW-Authenticate %q", name, p, got)
			}
			r.wantError(rec, http.StatusUnauthorized, "admin token")
			if bytes.Contains(rec.Body.Bytes(), []byte("acme/app")) {
				t.Errorf("%s, %s: a refused request saw data: %s", name, p, rec.Body)
			}
		}
	}
}

// With no token configured the API is closed, not open.
func TestEmptyConfiguredTokenRefusesEveryone(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.srv.Token = ""
	for _, auth := range []string{"", "Bearer ", "Bearer x"} {
		r.wantError(r.getAs("/api/v1/jobs", auth), http.StatusUnauthorized)
	}
}

func TestTheRightTokenIsAccepted(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, auth := range []string{"Bearer " + adminToken, "bearer " + adminToken, "BEARER  " + adminToken + " "} {
		if rec := r.getAs("/api/v1/jobs", auth); rec.Code != http.StatusOK {
			t.Errorf("%q: %d %s", auth, rec.Code, rec.Body)
		}
	}
	if rec := r.get("/api/v1/nowhere"); rec.Code != http.StatusNotFound {
		t.Errorf("unknown path with the token: %d, want 404", rec.Code)
	}
}

// Requests the routes do not take are answered in the API's JSON error
// shape too, not the mux's plain text.
func TestUnknownPathsAndMethodsAnswerJSON(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cases := []struct {
		method, path string
		code         int
		allow        string
		parts        []string
	}{
		{http.MethodGet, "/api/v1/nowhere", http.StatusNotFound, "", []string{"/api/v1/nowhere", "/api/v1/pools"}},
		{http.MethodGet, "/api/v1/jobs/", http.StatusNotFound, "", []string{"/api/v1/jobs/"}},
		{http.MethodGet, "/api/v2/jobs", http.StatusNotFound, "", []string{"/api/v2/jobs"}},
		{http.MethodPost, "/api/v1/jobs", http.StatusMethodNotAllowed, "GET, HEAD", []string{"POST", "/api/v1/jobs", "GET, HEAD"}},
		{http.MethodDelete, "/api/v1/jobs/101", http.StatusMethodNotAllowed, "GET, HEAD", []string{"DELETE"}},
		{http.MethodPut, "/api/v1/pools", http.StatusMethodNotAllowed, "GET, HEAD", []string{"PUT", "/api/v1/pools"}},
	}
	for _, c := range cases {
		req := httptest.NewRequest(c.method, c.path, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		rec := httptest.NewRecorder()
		r.srv.Handler().ServeHTTP(rec, req)
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: content type %q, body %q", c.method, c.path, ct, rec.Body)
		}
		if got := rec.Header().Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
		r.wantError(rec, c.code, c.parts...)
	}
}

func TestJobsListShowsEveryField(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var body struct{ Jobs []map[string]any }
	r.getJSON("/api/v1/jobs", &body)
	if got := ids(body.Jobs); !slices.Equal(got, []string{"105", "104", "103", "102", "101"}) {
		t.Fatalf("jobs %v, want every job, newest first", got)
	}
	fields := []string{"id", "run_id", "repo", "name", "labels", "status", "route", "via", "pool", "runner", "instance_id",
		"runner_name", "reason", "conclusion", "attempts", "queued_at", "assigned_at", "started_at", "completed_at",
		"created_at", "updated_at"}
	for _, j := range body.Jobs {
		for _, k := range fields {
			if _, ok := j[k]; !ok {
				t.Errorf("job %v has no %q", j["id"], k)
			}
		}
		if len(j) != len(fields) {
			t.Errorf("job %v has fields %v, want exactly %v", j["id"], keys(j), fields)
		}
	}
	assigned := body.Jobs[3]
	want := map[string]any{"id": 102.0, "run_id": 1020.0, "status": "assigned", "pool": "small-x64", "instance_id": "i-1",
		"route": "pool", "via": "pool", "runner_name": "bp-i-1", "reason": "", "completed_at": nil,
		"assigned_at": t0.Add(time.Second).Format(time.RFC3339), "queued_at": t0.Add(-59 * time.Second).Format(time.RFC3339),
		"created_at": t0.Add(time.Second).Format(time.RFC3339)}
	for k, v := range want {
		if assigned[k] != v {
			t.Errorf("job 102 %s = %#v, want %#v", k, assigned[k], v)
		}
	}
	if rejected := body.Jobs[0]; rejected["status"] != "rejected" || !strings.Contains(rejected["reason"].(string), `pool "gpu"`) {
		t.Errorf("job 105: %v", rejected)
	}
}

func TestJobsFilters(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cases := []struct {
		query string
		want  []string
	}{
		{"status=queued", []string{"101"}},
		{"status=queued,running", []string{"103", "101"}},
		{"status=assigned&status=completed", []string{"104", "102"}},
		{"status=%20rejected%20,", []string{"105"}},
		{"status=", []string{"105", "104", "103", "102", "101"}},
		{"pool=small-x64", []string{"104", "102", "101"}},
		{"pool=gpu&status=rejected", []string{"105"}},
		{"pool=gpu&status=queued", []string{}},
		{"pool=big", []string{}},     // configured, no job yet
		{"pool=retired", []string{}}, // no longer configured, its status recorded
		{"instance=i-1", []string{"102"}},
		{"instance=c-1", []string{"102"}}, // i-1's cloud id
		{"instance=c-1&status=assigned", []string{"102"}},
		{"instance=c-1&status=running", []string{}},
		{"instance=i-3", []string{}}, // an instance that served no job
		{"instance=c-4", []string{}},
		{"limit=2", []string{"105", "104"}},
		{"limit=1000&status=completed", []string{"104"}},
		{"order=oldest&limit=2", []string{"101", "102"}},
		{"order=oldest&status=queued,running", []string{"101", "103"}},
		{"order=newest&limit=1", []string{"105"}},
	}
	for _, c := range cases {
		r.wantIDs("/api/v1/jobs?"+c.query, "jobs", c.want)
	}
}

func TestJobsRefusesBadFilters(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cases := map[string][]string{
		"status=bogus":                {`"bogus"`, "queued, assigned, running, completed, rejected"},
		"status=queued,Running":       {`"Running"`},
		"limit=abc":                   {"limit", `"abc"`},
		"limit=0":                     {"limit"},
		"limit=-1":                    {"limit"},
		"limit=1001":                  {"limit", "1..1000"},
		"limit=5&status=waiting":      {`"waiting"`},
		"status=completed&limit=1e3":  {"limit"},
		"state=running":               {`unknown parameter "state"`, "instance, limit, order, pool, status"},
		"order=Oldest":                {`bad order "Oldest"`, "newest or oldest"},
		"pool=a&pool=b":               {`parameter "pool" given 2 times`},
		"pool=nope":                   {`unknown pool "nope"`, "configured: small-x64, big"},
		"pool=smal-x64&status=queued": {`unknown pool "smal-x64"`},
		"instance=i-9":                {`unknown instance "i-9"`, "cloud id"},
		"instance=c-9&status=queued":  {`unknown instance "c-9"`},
	}
	for q, parts := range cases {
		r.wantError(r.get("/api/v1/jobs?"+q), http.StatusBadRequest, parts...)
	}
}

// A pool is known by being configured or by anything recorded in it: a
// pool no longer configured still has its jobs and instances listed, and
// with no configuration at hand every recorded pool is.
func TestPoolFiltersKnowRecordedPools(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	old := domain.Instance{ID: "i-9", CloudID: "c-9", Pool: "old-x64", Role: domain.RoleHot, Runner: "old-x64",
		State: domain.StateTerminated}
	if err := r.store.CreateInstances(r.ctx, []domain.Instance{old}); err != nil {
		t.Fatal(err)
	}
	r.wantIDs("/api/v1/jobs?pool=old-x64", "jobs", []string{})
	r.wantIDs("/api/v1/instances?pool=old-x64", "instances", []string{})
	r.wantIDs("/api/v1/instances?pool=old-x64&all=1", "instances", []string{"i-9"})
	r.wantIDs("/api/v1/jobs?instance=c-9", "jobs", []string{})
	r.srv.Pools = nil
	r.wantIDs("/api/v1/jobs?pool=small-x64", "jobs", []string{"104", "102", "101"})
	r.wantIDs("/api/v1/instances?pool=small-x64&state=stopped", "instances", []string{})
	r.wantError(r.get("/api/v1/jobs?pool=big"), http.StatusBadRequest, `unknown pool "big"`, "none is configured")
	r.wantError(r.get("/api/v1/instances?pool=big"), http.StatusBadRequest, `unknown pool "big"`)
}

func TestOneJob(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var j map[string]any
	r.getJSON("/api/v1/jobs/103", &j)
	if j["id"] != 103.0 || j["status"] != "running" || j["instance_id"] != "i-2" || j["via"] != "cold" || j["started_at"] == nil {
		t.Errorf("job 103: %v", j)
	}
	r.wantError(r.get("/api/v1/jobs/999"), http.StatusNotFound, "999")
	for _, bad := range []string{"abc", "0", "-3", "1.5", "99999999999999999999"} {
		r.wantError(r.get("/api/v1/jobs/"+bad), http.StatusBadRequest, bad)
	}
}

func TestInstances(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cases := []struct {
		query string
		want  []string
	}{
		{"", []string{"i-3", "i-2", "i-1"}},
		{"all=1", []string{"i-4", "i-3", "i-2", "i-1"}},
		{"all", []string{"i-4", "i-3", "i-2", "i-1"}},
		{"all=true", []string{"i-4", "i-3", "i-2", "i-1"}},
		{"all=0", []string{"i-3", "i-2", "i-1"}},
		{"state=terminated", []string{"i-4"}},
		{"state=claimed,ready", []string{"i-3", "i-1"}},
		{"state=stopped", []string{}},
		{"pool=small-x64", []string{"i-3", "i-1"}},
		{"pool=small-x64&all=1", []string{"i-4", "i-3", "i-1"}},
		{"pool=big", []string{}}, // configured, no instance yet
		{"pool=gpu", []string{}}, // recorded in a job
		{"runner=adhoc-1", []string{"i-2"}},
		{"all=1&limit=2", []string{"i-4", "i-3"}},
		{"limit=1&pool=small-x64", []string{"i-3"}},
		{"limit=1000", []string{"i-3", "i-2", "i-1"}},
	}
	for _, c := range cases {
		r.wantIDs("/api/v1/instances?"+c.query, "instances", c.want)
	}
	var body struct{ Instances []map[string]any }
	r.getJSON("/api/v1/instances?state=running", &body)
	if in := body.Instances[0]; in["job"] != "103" || in["job_started"] != true || in["role"] != "on-demand" || in["cloud_id"] != "c-2" {
		t.Errorf("instance i-2: %v", in)
	}
	r.wantError(r.get("/api/v1/instances?state=bogus"), http.StatusBadRequest, `"bogus"`, "terminated")
	r.wantError(r.get("/api/v1/instances?all=maybe"), http.StatusBadRequest, "all", `"maybe"`)
	r.wantError(r.get("/api/v1/instances?pool=smal-x64"), http.StatusBadRequest, `unknown pool "smal-x64"`, "small-x64, big")
	r.wantError(r.get("/api/v1/instances?pool=smal-x64&all=1"), http.StatusBadRequest, `unknown pool "smal-x64"`)
	r.wantError(r.get("/api/v1/instances?status=running"), http.StatusBadRequest, `unknown parameter "status"`, "all, limit, pool, runner, state")
	for q, parts := range map[string][]string{
		"limit=0": {"limit"}, "limit=-1": {"limit"}, "limit=abc": {"limit", `"abc"`}, "limit=1001": {"limit", "1..1000"},
		"limit=1&limit=2": {`parameter "limit" given 2 times`},
	} {
		r.wantError(r.get("/api/v1/instances?"+q), http.StatusBadRequest, parts...)
	}
	r.wantError(r.get("/api/v1/pools?pool=linux"), http.StatusBadRequest, `unknown parameter "pool": this list takes none`)
	r.wantError(r.get("/api/v1/spot?x=1"), http.StatusBadRequest, `unknown parameter "x": this list takes none`)
}

// A store keeps terminated instances: listing them all is bounded as the
// jobs are, the newest kept.
func TestInstancesListIsLimited(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for i := range 120 {
		r.clk.Advance(time.Second)
		in := domain.Instance{ID: fmt.Sprintf("old-%03d", i), Pool: "small-x64", Role: domain.RoleHot, Runner: "small-x64",
			State: domain.StateTerminated}
		if err := r.store.CreateInstances(r.ctx, []domain.Instance{in}); err != nil {
			t.Fatal(err)
		}
	}
	cs := &countingStore{Store: r.store}
	r.srv.Store = cs
	var body struct{ Instances []map[string]any }
	r.getJSON("/api/v1/instances?all=1", &body)
	if got := ids(body.Instances); len(got) != 100 || got[0] != "old-119" || got[99] != "old-020" {
		t.Errorf("all=1 lists %d instances from %v to %v, want the newest 100 (old-119 to old-020)", len(got), got[0], got[len(got)-1])
	}
	// The store hands over the page, not every row it keeps for the
	// handler to cut.
	if cs.listings != 1 || cs.rows != 100 {
		t.Errorf("all=1 read %d rows in %d listings of the store, want the 100 listed in one", cs.rows, cs.listings)
	}
	r.getJSON("/api/v1/instances?all=1&limit=1000", &body)
	if got := ids(body.Instances); len(got) != 124 || got[123] != "i-1" {
		t.Errorf("all=1&limit=1000 lists %d instances, the last %v; want all 124, i-1 last", len(got), got[len(got)-1])
	}
}

func TestPoolsJoinConfigurationWithStatus(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var body struct{ Pools []PoolView }
	r.getJSON("/api/v1/pools", &body)
	if len(body.Pools) != 2 || body.Pools[0].Name != "small-x64" || body.Pools[1].Name != "big" {
		t.Fatalf("pools %+v, want the configured pools in configuration order", body.Pools)
	}
	small, big := body.Pools[0], body.Pools[1]
	// i-1 (hot, claimed) serves a job; i-3 (stopped, ready) is warmed and
	// waits to stop; i-4 is terminated and counts nowhere.
	wantSmall := map[string]int{"ready_hot": 0, "stopped": 0, "warming": 1, "detached": 1, "other": 0, "reusable": 0}
	if small.Environment != "dev" || small.Runner != "small-x64" || small.Timezone != "Europe/Paris" ||
		small.Schedule != "workday" || small.Target == nil || small.Target.Hot != 2 || small.Target.Stopped != 3 ||
		small.SpecHash != "abc123" || !maps.Equal(small.Counts, wantSmall) || small.LastCycle == nil || !small.LastCycle.Equal(t0) ||
		small.LastError != "StartInstances: throttled" {
		t.Errorf("small-x64: %+v (counts %v, want %v)", small, small.Counts, wantSmall)
	}
	if big.Runner != "big" || big.Counts == nil || big.Counts["ready_hot"] != 0 || big.Counts["warming"] != 0 ||
		big.LastCycle != nil || big.Schedule != "" || big.Target != nil {
		t.Errorf("big (no status yet): %+v", big)
	}
}

// A pool the converger has not cycled yet has no target: read as zero,
// its empty counts would say it is at target.
func TestPoolsWithoutACycleHaveNoTarget(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var body struct{ Pools []map[string]any }
	r.getJSON("/api/v1/pools", &body)
	big := body.Pools[1]
	for _, k := range []string{"target", "last_cycle"} {
		v, ok := big[k]
		if !ok || v != nil {
			t.Errorf("big %s = %v (present: %t), want null", k, v, ok)
		}
	}
	if small := body.Pools[0]; small["last_cycle"] != t0.Format(time.RFC3339) {
		t.Errorf("small-x64 last_cycle = %v, want %s", small["last_cycle"], t0.Format(time.RFC3339))
	}
}

// The converger records a pool's counts before applying its plan; the
// API counts the instances as they are now, so what the last cycle created
// shows at once.
func TestPoolCountsAreLiveNotTheLastCycles(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if err := r.store.PutPoolStatus(r.ctx, domain.PoolStatus{Name: "big", Schedule: "default", Target: domain.Target{Hot: 3},
		Counts: map[string]int{"ready_hot": 0, "warming": 0}, LastCycle: r.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		in := domain.Instance{ID: fmt.Sprintf("b-%d", i), Pool: "big", Role: domain.RoleHot, Runner: "big", State: domain.StatePending}
		if err := r.store.CreateInstances(r.ctx, []domain.Instance{in}); err != nil {
			t.Fatal(err)
		}
	}
	var body struct{ Pools []PoolView }
	r.getJSON("/api/v1/pools", &body)
	big := body.Pools[1]
	if big.Counts["warming"] != 3 || big.Counts["ready_hot"] != 0 || big.Target == nil || big.Target.Hot != 3 ||
		big.Schedule != "default" || big.LastCycle == nil || !big.LastCycle.Equal(r.clk.Now()) {
		t.Errorf("big: %+v, counts %v; want 3 warming toward a target of 3 hot", big, big.Counts)
	}
}

// countingStore counts the listings of instances and the rows they return.
type countingStore struct {
	Store
	listings, rows int
}

func (c *countingStore) ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error) {
	c.listings++
	list, err := c.Store.ListInstances(ctx, f)
	c.rows += len(list)
	return list, err
}

func TestPoolsListTheInstancesOnceForAllPools(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cs := &countingStore{Store: r.store}
	r.srv.Store = cs
	r.srv.Pools = func() []PoolInfo {
		return []PoolInfo{{Name: "small-x64"}, {Name: "big"}, {Name: "gpu"}, {Name: "arm"}}
	}
	var body struct{ Pools []PoolView }
	r.getJSON("/api/v1/pools", &body)
	if len(body.Pools) != 4 || body.Pools[0].Counts["detached"] != 1 {
		t.Fatalf("pools %+v", body.Pools)
	}
	if cs.listings != 1 {
		t.Errorf("%d instance listings for 4 pools, want 1", cs.listings)
	}
}

func TestPoolsWithNoneConfigured(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, pools := range []func() []PoolInfo{nil, func() []PoolInfo { return nil }} {
		r.srv.Pools = pools
		rec := r.get("/api/v1/pools")
		if rec.Code != http.StatusOK || strings.Join(strings.Fields(rec.Body.String()), "") != `{"pools":[]}` {
			t.Errorf("%d %s, want an empty list", rec.Code, rec.Body)
		}
	}
}

// The runner configuration is a credential: it is in the store, and no
// response of any endpoint, filter or error carries it (nor the token).
func TestResponsesNeverCarryTheRunnerConfig(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, id := range []string{"i-1", "i-2", "i-3", "i-4"} {
		if in, err := r.store.GetInstance(r.ctx, id); err != nil || in.RunnerConfig != jitSecret {
			t.Fatalf("instance %s config stored: %t (%v): the test needs it stored", id, in.RunnerConfig == jitSecret, err)
		}
	}
	urls := []string{"/api/v1/jobs", "/api/v1/jobs?limit=1000", "/api/v1/jobs?instance=i-1", "/api/v1/instances",
		"/api/v1/instances?all=1", "/api/v1/instances?all=true&pool=small-x64", "/api/v1/instances?runner=adhoc-1",
		"/api/v1/instances?state=bogus", "/api/v1/instances?all=maybe",
		"/api/v1/pools", "/api/v1/jobs?status=bogus", "/api/v1/jobs/999", "/api/v1/jobs/x"}
	for _, s := range []string{"queued", "assigned", "running", "completed", "rejected"} {
		urls = append(urls, "/api/v1/jobs?status="+s)
	}
	for _, s := range domain.States {
		urls = append(urls, "/api/v1/instances?state="+string(s))
	}
	for id := 101; id <= 105; id++ {
		urls = append(urls, fmt.Sprintf("/api/v1/jobs/%d", id))
	}
	for _, u := range urls {
		rec := r.get(u)
		if u == "/api/v1/instances?all=1" && !strings.Contains(rec.Body.String(), `"i-4"`) {
			t.Fatalf("GET %s lists no instance i-4: the test looks at nothing: %s", u, rec.Body)
		}
		for _, secret := range []string{jitSecret, "JITCONFIG", adminToken} {
			if strings.Contains(rec.Body.String(), secret) || strings.Contains(fmt.Sprint(rec.Header()), secret) {
				t.Errorf("GET %s leaks %q: %s", u, secret, rec.Body)
			}
		}
	}
	if strings.Contains(r.logs.String(), jitSecret) {
		t.Error("the log holds the runner config")
	}
}

// A store failure is a 500 with a generic message; the detail goes to the log.
func TestStoreFailureIsAServerError(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.store.Close()
	for _, p := range []string{"/api/v1/jobs", "/api/v1/jobs/101", "/api/v1/instances", "/api/v1/pools"} {
		rec := r.get(p)
		r.wantError(rec, http.StatusInternalServerError, "see the server log")
		if strings.Contains(rec.Body.String(), "closed") {
			t.Errorf("%s: the response carries the store's error: %s", p, rec.Body)
		}
	}
	if n := strings.Count(r.logs.String(), "level=WARN"); n != 4 || strings.Contains(r.logs.String(), "level=ERROR") {
		t.Errorf("%d warnings logged, want 4 and no ERROR:\n%s", n, r.logs)
	}
	r.srv.Log = nil // falls back to the default logger rather than panicking
	r.wantError(r.get("/api/v1/jobs"), http.StatusInternalServerError)
}

// wantIDs checks that path answers with a list under key (a list, never
// null) of the ids want, in that order.
func (r *rig) wantIDs(path, key string, want []string) {
	r.t.Helper()
	var body map[string]json.RawMessage
	r.getJSON(path, &body)
	var list []map[string]any
	if err := json.Unmarshal(body[key], &list); err != nil {
		r.t.Fatalf("%s: %s: %v", path, key, err)
	}
	if list == nil {
		r.t.Errorf("%s: %s is null, want a list", path, key)
	}
	if got := ids(list); !slices.Equal(got, want) {
		r.t.Errorf("%s: %s %v, want %v", path, key, got, want)
	}
}

// ids returns the "id" of each object as text.
func ids(list []map[string]any) []string {
	out := []string{}
	for _, m := range list {
		out = append(out, fmt.Sprint(m["id"]))
	}
	return out
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Mounted beside a catch-all, as the server mounts it beside the dashboard,
// every path under /api is the API's: the bare /api/v1 is neither
// redirected nor handed to the catch-all, and answers JSON.
func TestMountAnswersEveryAPIPathInJSON(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>dashboard</html>"))
	})
	r.srv.Mount(mux)
	serve := func(path, authorization string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: %d, content type %q, body %q", path, rec.Code, ct, rec.Body)
		}
		return rec
	}
	for _, p := range []string{"/api", "/api/", "/api/v1", "/api/v1/", "/api/v2/jobs"} {
		r.wantError(serve(p, "Bearer "+adminToken), http.StatusNotFound, p, "/api/v1/jobs")
		r.wantError(serve(p, ""), http.StatusUnauthorized, "admin token")
	}
	if rec := serve("/api/v1/jobs", "Bearer "+adminToken); rec.Code != http.StatusOK {
		t.Errorf("GET /api/v1/jobs: %d", rec.Code)
	}
}

// A job readmitted after a rejection says how often, apart from its
// attempts, which count its failed machines; a job never readmitted
// carries no such field.
func TestAJobViewSaysHowOftenItWasReadmitted(t *testing.T) {
	for _, tc := range []struct {
		readmissions int
		want         string
	}{{0, ""}, {2, `"readmissions":2`}} {
		b, err := json.Marshal(ViewJob(domain.Job{ID: 1, Attempts: 1, Readmissions: tc.readmissions}))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), `"readmissions"`); got != (tc.want != "") || !strings.Contains(string(b), tc.want) || !strings.Contains(string(b), `"attempts":1`) {
			t.Errorf("readmitted %d times: %s", tc.readmissions, b)
		}
	}
}
