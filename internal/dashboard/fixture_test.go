package dashboard

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

const (
	adminToken  = "admin-5f1d0c9a7e3b2864"
	viewerToken = "viewer-8c2e4a6b1d9f3057"
	// xss stands for anything a webhook can carry into a page.
	xss = `<script>window.pwned=1</script>`
)

// t0 is a Tuesday, 09:00 UTC (10:00 in Paris, 04:00 in New York).
var t0 = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

const testConfig = `runners:
  small:
    image: ubuntu24-full-x64
    ram: 1
pools:
  small-x64:
    runner: small
    timezone: Europe/Paris
    schedule:
      - name: default
        hot: 1
        stopped: 2
      - name: nights
        match:
          time: ["22:00", "06:00"]
        stopped: 2
  burst:
    runner: small
    schedule:
      - name: default
        hot: 1
    autoscale:
      max: 5
`

// countingStore counts the queries the dashboard makes.
type countingStore struct {
	Store
	n atomic.Int64
}

func (c *countingStore) ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error) {
	c.n.Add(1)
	return c.Store.ListInstances(ctx, f)
}

func (c *countingStore) ListJobs(ctx context.Context, f domain.JobFilter) ([]domain.Job, error) {
	c.n.Add(1)
	return c.Store.ListJobs(ctx, f)
}

func (c *countingStore) GetJob(ctx context.Context, id int64) (domain.Job, error) {
	c.n.Add(1)
	return c.Store.GetJob(ctx, id)
}

func (c *countingStore) ListPoolStatus(ctx context.Context) ([]domain.PoolStatus, error) {
	c.n.Add(1)
	return c.Store.ListPoolStatus(ctx)
}

// rig is a dashboard on a real SQLite store. The store and the dashboard
// have clocks of their own: the dashboard's paces its refreshes.
type rig struct {
	t        *testing.T
	ctx      context.Context
	clk      *clock.Virtual // the dashboard's
	storeClk *clock.Virtual // stamps the rows
	store    *sqlite.Store
	counting *countingStore
	cfg      *config.Config
	recorder *ConfigRecorder
	reg      *prometheus.Registry
	logs     *testlog.Buffer
	d        *Dashboard
}

func newRig(t *testing.T, edit ...func(*Options)) *rig {
	t.Helper()
	r := &rig{t: t, ctx: context.Background(), clk: clock.NewVirtual(t0), storeClk: clock.NewVirtual(t0.Add(-time.Hour)),
		recorder: &ConfigRecorder{}, reg: prometheus.NewRegistry(), logs: &testlog.Buffer{}}
	r.store, _ = sqlitetest.Open(t, r.storeClk)
	r.counting = &countingStore{Store: r.store}
	cfg, err := config.Parse("runs-on.yml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	r.cfg = cfg
	r.recorder.Loaded("runs-on.yml", []byte(testConfig), cfg, t0.Add(-2*time.Hour))
	o := Options{Store: r.counting, Clock: r.clk, Log: slog.New(slog.NewTextHandler(r.logs, nil)),
		AdminToken: adminToken, ViewerToken: viewerToken, Environment: "dev", Registry: r.reg,
		Pools:  func() []domain.Pool { return r.cfg.PoolsFor("dev") },
		Config: r.recorder.Status,
		Autoscale: func(pool string) (Decision, bool) {
			if pool != "burst" {
				return Decision{}, false
			}
			return Decision{Action: "up", Count: 3, Score: 1.71, Reason: "demand 6 > capacity 1 × 1.5"}, true
		},
	}
	for _, e := range edit {
		e(&o)
	}
	if r.d, err = New(o); err != nil {
		t.Fatal(err)
	}
	return r
}

// get requests path with the admin token as a bearer token.
func (r *rig) get(path string) *httptest.ResponseRecorder {
	return r.do(httptest.NewRequest(http.MethodGet, path, nil), "Bearer "+adminToken)
}

func (r *rig) do(req *http.Request, authorization string) *httptest.ResponseRecorder {
	r.t.Helper()
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	rec := httptest.NewRecorder()
	r.d.ServeHTTP(rec, req)
	return rec
}

// page requests path and wants 200.
func (r *rig) page(path string) string {
	r.t.Helper()
	rec := r.get(path)
	if rec.Code != http.StatusOK {
		r.t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// pageShows requests path, wants 200, and reports each of wants the page
// lacks.
func (r *rig) pageShows(path string, wants ...string) string {
	r.t.Helper()
	body := r.page(path)
	for _, want := range wants {
		if !strings.Contains(body, want) {
			r.t.Errorf("%s lacks %q", path, want)
		}
	}
	return body
}

// later moves the dashboard's clock past the refresh interval, so the next
// request reads the store again.
func (r *rig) later() { r.clk.Advance(DefaultRefresh) }

func (r *rig) createJobs(jobs ...domain.Job) {
	r.t.Helper()
	for _, j := range jobs {
		edit := j
		j.Status, j.InstanceID, j.Via, j.RunnerName, j.Conclusion = domain.JobQueued, "", "", "", ""
		j.AssignedAt, j.StartedAt, j.CompletedAt = time.Time{}, time.Time{}, time.Time{}
		if edit.Status == domain.JobRejected {
			j.Status = domain.JobRejected
		}
		if _, err := r.store.CreateJobs(r.ctx, []domain.Job{j}); err != nil {
			r.t.Fatal(err)
		}
		if edit.Status == domain.JobQueued || edit.Status == domain.JobRejected {
			continue
		}
		_, err := r.store.TransitionJob(r.ctx, j.ID, domain.JobGuard{Status: domain.JobQueued}, func(n *domain.Job) {
			n.Status, n.InstanceID, n.Via, n.RunnerName, n.Conclusion = edit.Status, edit.InstanceID, edit.Via, edit.RunnerName, edit.Conclusion
			n.AssignedAt, n.StartedAt, n.CompletedAt = edit.AssignedAt, edit.StartedAt, edit.CompletedAt
		})
		if err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *rig) createInstances(insts ...domain.Instance) {
	r.t.Helper()
	for _, in := range insts {
		if err := r.store.CreateInstances(r.ctx, []domain.Instance{in}); err != nil {
			r.t.Fatal(err)
		}
		r.storeClk.Advance(time.Minute)
	}
}

// seed writes a small fleet: the pool small-x64 at its target (one hot
// ready, two stopped), a cold-start instance running a job, a terminated
// one with its reason, and jobs in every status, some carrying markup.
func (r *rig) seed() {
	r.t.Helper()
	small := func(id string, role domain.Role, st domain.State) domain.Instance {
		return domain.Instance{ID: id, CloudID: "c-" + id, Pool: "small-x64", Role: role, Runner: "small", State: st,
			RunnerConfig: "JITCONFIG-SECRET"}
	}
	r.createInstances(
		small("bp-hot1", domain.RoleHot, domain.StateReady),
		small("bp-stop1", domain.RoleStopped, domain.StateStopped),
		small("bp-stop2", domain.RoleStopped, domain.StateStopped),
		domain.Instance{ID: "bp-cold1", CloudID: "c-cold1", Role: domain.RoleOnDemand, Runner: "small", State: domain.StateRunning,
			Job: "103", JobStarted: true, RunnerName: "bp-cold1-103"},
		domain.Instance{ID: "bp-gone1", CloudID: "c-gone1", Pool: "small-x64", Role: domain.RoleHot, Runner: "small",
			State: domain.StateTerminating, JobsServed: 1},
	)
	q := t0.Add(-10 * time.Minute)
	r.storeClk.AdvanceTo(q.Add(time.Second)) // GitHub queued the jobs a second before bullpen recorded them
	base := domain.Job{RunAttempt: 1, Repo: "acme/app", Name: "build", Workflow: "CI", QueuedAt: q, Route: domain.RoutePool, Pool: "small-x64", Runner: "small"}
	job := func(id int64, edit func(*domain.Job)) domain.Job {
		j := base
		j.ID, j.RunID, j.Labels = id, id*10, []string{"runs-on=1/pool=small-x64"}
		edit(&j)
		return j
	}
	r.createJobs(
		job(101, func(j *domain.Job) { j.Status = domain.JobQueued; j.Repo = `acme/"><img src=x onerror=alert(1)>` }),
		job(102, func(j *domain.Job) {
			j.Status, j.InstanceID, j.Via, j.AssignedAt = domain.JobAssigned, "bp-hot1", domain.ViaHot, q.Add(2*time.Second)
		}),
		job(103, func(j *domain.Job) {
			j.Status, j.InstanceID, j.Via, j.Route, j.Pool = domain.JobRunning, "bp-cold1", domain.ViaCold, domain.RouteLaunch, ""
			j.AssignedAt, j.StartedAt, j.RunnerName = q.Add(40*time.Second), q.Add(55*time.Second), "bp-cold1-103<i>"
		}),
		job(104, func(j *domain.Job) {
			j.Status, j.InstanceID, j.Via, j.Conclusion = domain.JobCompleted, "bp-gone1", domain.ViaHot, "success"
			j.AssignedAt, j.StartedAt, j.CompletedAt = q.Add(time.Second), q.Add(3*time.Second), q.Add(5*time.Minute)
		}),
		job(105, func(j *domain.Job) {
			j.Status, j.Route, j.Pool = domain.JobRejected, "", "gpu"
			j.Labels = []string{"runs-on=5/pool=gpu", xss}
			j.Reason = `pool "gpu" is not configured for environment "dev" (pools: burst, small-x64) ` + xss
		}),
	)
	r.storeClk.AdvanceTo(q.Add(5*time.Minute + time.Second))
	_, err := r.store.Transition(r.ctx, "bp-gone1", domain.Guard{State: domain.StateTerminating}, func(in *domain.Instance) {
		in.State, in.Reason = domain.StateTerminated, "job finished <b>"
	})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, id := range []string{"bp-hot1", "bp-stop1", "bp-cold1"} {
		if err := r.store.RecordHeartbeat(r.ctx, id, t0.Add(-3*time.Second)); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := r.store.PutPoolStatus(r.ctx, domain.PoolStatus{Name: "small-x64", Schedule: "default",
		Target: domain.Target{Hot: 1, Stopped: 2}, LastCycle: t0.Add(-10 * time.Second)}); err != nil {
		r.t.Fatal(err)
	}
}

// count returns how many times part occurs in s.
func count(s, part string) int { return strings.Count(s, part) }
