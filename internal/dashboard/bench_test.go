package dashboard

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

// Scale of the benchmark: what the dashboard must draw in under 100 ms.
const (
	benchInstances = 1000
	benchJobs      = 10_000
)

// seedAtScale fills st with benchInstances instances (pool members in every
// state, instances launched for jobs, terminated ones with their reasons)
// and benchJobs jobs (a few hundred waiting or running, the rest finished or
// rejected), as a busy day leaves them.
func seedAtScale(b testing.TB, st *sqlite.Store, pools []domain.Pool) {
	ctx := context.Background()
	states := []domain.State{domain.StateReady, domain.StateStopped, domain.StateStopped, domain.StateBooting,
		domain.StateRunning, domain.StateClaimed, domain.StateReleasing, domain.StateTerminated, domain.StateStopping, domain.StateError}
	var insts []domain.Instance
	for k := range benchInstances {
		in := domain.Instance{ID: fmt.Sprintf("bp-%06d", k), CloudID: fmt.Sprintf("i-%06d", k), Runner: "small",
			State: states[k%len(states)], JobsServed: k % 7}
		switch {
		case k%3 == 0:
			in.Role = domain.RoleOnDemand
		case in.State == domain.StateStopped:
			in.Role, in.Pool = domain.RoleStopped, pools[k%len(pools)].Name
		default:
			in.Role, in.Pool = domain.RoleHot, pools[k%len(pools)].Name
		}
		if in.State == domain.StateTerminated || in.State == domain.StateError {
			in.Reason = "job finished"
		}
		insts = append(insts, in)
	}
	for _, chunk := range domain.Chunk(insts, 500) {
		if err := st.CreateInstances(ctx, chunk); err != nil {
			b.Fatal(err)
		}
	}
	q := t0.Add(-24 * time.Hour)
	var jobs []domain.Job
	for k := range benchJobs {
		j := domain.Job{ID: int64(1_000_000 + k), RunID: int64(k), RunAttempt: 1, Repo: "acme/app", Name: "build", Workflow: "CI",
			Labels: []string{"runs-on=1/pool=small-x64"}, Route: domain.RoutePool, Pool: pools[k%len(pools)].Name,
			QueuedAt: q.Add(time.Duration(k) * 8 * time.Second)}
		via := []domain.Via{domain.ViaPool, domain.ViaReuse, domain.ViaCold}[k%3]
		switch {
		case k < 300:
			j.Status = domain.JobQueued
		case k < 500:
			j.Status, j.Via, j.InstanceID, j.AssignedAt = domain.JobAssigned, via, insts[k%benchInstances].ID, j.QueuedAt.Add(time.Second)
		case k < 750:
			j.Status, j.Via, j.InstanceID = domain.JobRunning, via, insts[k%benchInstances].ID
			j.AssignedAt, j.StartedAt = j.QueuedAt.Add(time.Second), j.QueuedAt.Add(time.Duration(k%90)*time.Second)
		case k < 1000:
			j.Status, j.Reason, j.Labels = domain.JobRejected, `pool "gpu" is not configured`, []string{"runs-on=1/pool=gpu"}
		default:
			j.Status, j.Via, j.InstanceID, j.Conclusion = domain.JobCompleted, via, insts[k%benchInstances].ID, "success"
			j.AssignedAt, j.StartedAt = j.QueuedAt.Add(time.Second), j.QueuedAt.Add(time.Duration(k%90)*time.Second)
			j.CompletedAt = j.StartedAt.Add(5 * time.Minute)
		}
		jobs = append(jobs, j)
	}
	for _, chunk := range domain.Chunk(jobs, 1000) {
		if _, err := st.CreateJobs(ctx, chunk); err != nil {
			b.Fatal(err)
		}
	}
	for _, p := range pools {
		if err := st.PutPoolStatus(ctx, domain.PoolStatus{Name: p.Name, Schedule: "default", Target: domain.Target{Hot: 30, Stopped: 60},
			LastCycle: t0}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPages serves each page with 1,000 instances and 10,000 jobs in
// a SQLite store: "cold" reads a new snapshot for every request (the four
// queries and the page), "warm" draws from the snapshot in hand, as every
// request but the first of each refresh interval does.
//
//	go test -run '^$' -bench Pages -benchtime 50x ./internal/dashboard
func BenchmarkPages(b *testing.B) {
	cfg, err := config.Parse("runs-on.yml", []byte(testConfig))
	if err != nil {
		b.Fatal(err)
	}
	pools := cfg.PoolsFor("dev")
	st, _ := sqlitetest.Open(b, clock.NewVirtual(t0))
	seedAtScale(b, st, pools)
	clk := clock.NewVirtual(t0)
	d, err := New(Options{Store: st, Clock: clk, Log: slog.New(slog.DiscardHandler), AdminToken: adminToken,
		Pools: func() []domain.Pool { return pools }})
	if err != nil {
		b.Fatal(err)
	}
	for m := range int(historySpan.Minutes()) { // a full chart of the last hours
		clk.AdvanceTo(t0.Add(time.Duration(m) * time.Minute))
		if _, err := d.cache.get(context.Background()); err != nil {
			b.Fatal(err)
		}
		d.cache.cur.Store(nil)
	}
	for _, path := range []string{"/", "/jobs", "/jobs/1000600", "/instances", "/config"} {
		for _, mode := range []string{"cold", "warm"} {
			b.Run(fmt.Sprintf("%s/%s", path, mode), func(b *testing.B) {
				size := 0
				for b.Loop() {
					if mode == "cold" {
						d.cache.cur.Store(nil)
					}
					req := httptest.NewRequest(http.MethodGet, path, nil)
					req.Header.Set("Authorization", "Bearer "+adminToken)
					rec := httptest.NewRecorder()
					d.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("GET %s: %d", path, rec.Code)
					}
					size = rec.Body.Len()
				}
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/page")
				b.ReportMetric(float64(size)/1024, "KiB")
			})
		}
	}
}
