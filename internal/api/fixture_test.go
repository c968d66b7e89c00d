package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

const (
	adminToken = "admin-7f3c9e21d4b8a650"
	// jitSecret stands for a just-in-time runner configuration: a credential
	// that must never leave the store through this API.
	jitSecret = "JITCONFIG-eyJydW5uZXIiOiJzZWNyZXQifQ-DO-NOT-LEAK"
)

var t0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

// rig is the status API on a real SQLite store holding one job of each
// status, instances in several states and the converger's pool status.
type rig struct {
	t     *testing.T
	ctx   context.Context
	clk   *clock.Virtual
	store *sqlite.Store
	srv   *Server
	logs  *testlog.Buffer
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{t: t, ctx: context.Background(), clk: clock.NewVirtual(t0), logs: &testlog.Buffer{}}
	st, _ := sqlitetest.Open(t, r.clk)
	r.store = st
	r.srv = &Server{Store: st, Token: adminToken, Log: slog.New(slog.NewTextHandler(r.logs, nil)), Pools: func() []PoolInfo {
		return []PoolInfo{
			{Name: "small-x64", Environment: "dev", Runner: "small-x64", Timezone: "Europe/Paris"},
			{Name: "big", Environment: "dev", Runner: "big"},
		}
	}}
	r.seed()
	return r
}

// seed writes jobs 101..105 one second apart (queued, assigned, running,
// completed, rejected), then instances i-1..i-4 and two pool statuses.
func (r *rig) seed() {
	r.t.Helper()
	base := domain.Job{RunAttempt: 1, Repo: "acme/app", Name: "build", Workflow: "CI", Status: domain.JobQueued}
	specs := []struct {
		id     int64
		labels []string
		route  domain.Route
		pool   string
		edit   func(*domain.Job)
	}{
		{101, []string{"runs-on=1/pool=small-x64"}, domain.RoutePool, "small-x64", nil},
		{102, []string{"runs-on=2/pool=small-x64"}, domain.RoutePool, "small-x64", func(j *domain.Job) {
			j.Status, j.InstanceID, j.Via, j.RunnerName, j.RunnerID = domain.JobAssigned, "i-1", domain.ViaPool, "bp-i-1", 77
			j.AssignedAt = r.clk.Now()
		}},
		{103, []string{"runs-on=3/cpu=4"}, domain.RouteLaunch, "", func(j *domain.Job) {
			j.Status, j.InstanceID, j.Via, j.RunnerName, j.RunnerID = domain.JobRunning, "i-2", domain.ViaCold, "bp-i-2", 78
			j.AssignedAt, j.StartedAt = r.clk.Now(), r.clk.Now()
		}},
		{104, []string{"runs-on=4/pool=small-x64"}, domain.RoutePool, "small-x64", func(j *domain.Job) {
			j.Status, j.Conclusion, j.CompletedAt = domain.JobCompleted, "success", r.clk.Now()
		}},
		{105, []string{"runs-on=5/pool=gpu"}, "", "gpu", func(j *domain.Job) {
			j.Status, j.Reason = domain.JobRejected, `pool "gpu" is not configured for environment "dev" (pools: big, small-x64)`
		}},
	}
	for _, s := range specs {
		j := base
		j.ID, j.RunID, j.Labels, j.Route, j.Pool, j.QueuedAt = s.id, s.id*10, s.labels, s.route, s.pool, r.clk.Now().Add(-time.Minute)
		if _, err := r.store.CreateJobs(r.ctx, []domain.Job{j}); err != nil {
			r.t.Fatal(err)
		}
		if s.edit != nil {
			if _, err := r.store.TransitionJob(r.ctx, s.id, domain.JobGuard{Status: domain.JobQueued}, s.edit); err != nil {
				r.t.Fatal(err)
			}
		}
		r.clk.Advance(time.Second)
	}
	r.seedInstancesAndPools()
}

// seedInstancesAndPools writes instances i-1..i-4, each holding a runner
// registration: the ready and the terminated ones too, which the services
// never leave, to make the credential test stricter.
func (r *rig) seedInstancesAndPools() {
	r.t.Helper()
	insts := []domain.Instance{
		{ID: "i-1", CloudID: "c-1", Pool: "small-x64", Role: domain.RoleHot, Runner: "small-x64", State: domain.StateClaimed, Job: "102",
			RunnerName: "bp-i-1", RunnerConfig: jitSecret},
		{ID: "i-2", CloudID: "c-2", Role: domain.RoleOnDemand, Runner: "adhoc-1", State: domain.StateRunning, Job: "103", JobStarted: true,
			RunnerName: "bp-i-2", RunnerConfig: jitSecret},
		{ID: "i-3", CloudID: "c-3", Pool: "small-x64", Role: domain.RoleStopped, Runner: "small-x64", State: domain.StateReady,
			RunnerName: "bp-i-3", RunnerConfig: jitSecret},
		{ID: "i-4", CloudID: "c-4", Pool: "small-x64", Role: domain.RoleHot, Runner: "small-x64", State: domain.StateTerminated,
			RunnerName: "bp-i-4", RunnerConfig: jitSecret},
	}
	for _, in := range insts {
		if err := r.store.CreateInstances(r.ctx, []domain.Instance{in}); err != nil {
			r.t.Fatal(err)
		}
		r.clk.Advance(time.Second)
	}
	for _, ps := range []domain.PoolStatus{
		{Name: "small-x64", Schedule: "workday", Target: domain.Target{Hot: 2, Stopped: 3}, SpecHash: "abc123",
			Counts: map[string]int{"hot/claimed": 1, "stopped/ready": 1}, LastCycle: t0, LastError: "StartInstances: throttled"},
		{Name: "retired", Schedule: "default", Target: domain.Target{Hot: 9}}, // no longer configured
	} {
		if err := r.store.PutPoolStatus(r.ctx, ps); err != nil {
			r.t.Fatal(err)
		}
	}
}

// get requests path with the admin token.
func (r *rig) get(path string) *httptest.ResponseRecorder {
	return r.getAs(path, "Bearer "+adminToken)
}

// getAs requests path with the given Authorization header ("" for none).
func (r *rig) getAs(path, authorization string) *httptest.ResponseRecorder {
	r.t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	rec := httptest.NewRecorder()
	r.srv.Handler().ServeHTTP(rec, req)
	return rec
}

// getJSON requests path, wants 200, and decodes the body into v.
func (r *rig) getJSON(path string, v any) {
	r.t.Helper()
	rec := r.get(path)
	if rec.Code != http.StatusOK {
		r.t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		r.t.Errorf("GET %s: content type %q", path, ct)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		r.t.Fatalf("GET %s: %v in %s", path, err, rec.Body)
	}
}

// wantError checks an error response: its code and that the message
// mentions each of parts.
func (r *rig) wantError(rec *httptest.ResponseRecorder, code int, parts ...string) {
	r.t.Helper()
	var body struct{ Error string }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != code || body.Error == "" {
		r.t.Fatalf("response %d %s, want %d with an error message", rec.Code, rec.Body, code)
	}
	for _, p := range parts {
		if !bytes.Contains([]byte(body.Error), []byte(p)) {
			r.t.Errorf("error %q does not mention %q", body.Error, p)
		}
	}
}
