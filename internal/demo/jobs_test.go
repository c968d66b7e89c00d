package demo

import (
	"context"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

// The report splits the pool members' jobs by how each was served as
// recorded at the claim, not by the role its instance has by the end: a
// warm stopped-role member served hot and was then released for reuse
// (on-demand now), a pool's reusable instance is reuse, and an older row
// that recorded only "pool" counts under pool alone, whatever its
// instance's role.
func TestJobsReportSplitsPoolJobsByHowTheyWereServed(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewVirtual(monday)
	st, _ := sqlitetest.Open(t, clk)
	if err := st.CreateInstances(ctx, []domain.Instance{
		{ID: "bp-warm", CloudID: "c-warm", Pool: "p", Role: domain.RoleOnDemand, Runner: "small", State: domain.StateReady},
		{ID: "bp-stop", CloudID: "c-stop", Pool: "p", Role: domain.RoleStopped, Runner: "small", State: domain.StateStopped},
		{ID: "bp-reused", CloudID: "c-reused", Pool: "p", Role: domain.RoleOnDemand, Runner: "small", State: domain.StateReady},
	}); err != nil {
		t.Fatal(err)
	}
	for _, j := range []struct {
		id   int64
		in   string
		via  domain.Via
		wait time.Duration
	}{
		{1, "bp-warm", domain.ViaHot, 2 * time.Second},
		{2, "bp-stop", domain.ViaStopped, 40 * time.Second},
		{3, "bp-reused", domain.ViaReuse, 3 * time.Second},
		{4, "bp-stop", domain.ViaPool, 5 * time.Second},
	} {
		job := domain.Job{ID: j.id, RunID: 10 * j.id, Repo: "acme/app", Status: domain.JobQueued, Route: domain.RoutePool,
			Pool: "p", Runner: "small", QueuedAt: monday}
		if _, err := st.CreateJobs(ctx, []domain.Job{job}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.TransitionJob(ctx, j.id, domain.JobGuard{Status: domain.JobQueued}, func(n *domain.Job) {
			n.Status, n.InstanceID, n.Via, n.Conclusion = domain.JobCompleted, j.in, j.via, "success"
			n.AssignedAt, n.StartedAt, n.CompletedAt = monday.Add(time.Second), monday.Add(j.wait), monday.Add(time.Minute)
		}); err != nil {
			t.Fatal(err)
		}
	}
	w := &world{a: &app.App{Store: st}}
	r, err := w.jobsReport(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for via, want := range map[string]Latencies{
		"hot":     {Count: 1, P50: 2, P90: 2, P99: 2, Max: 2},
		"stopped": {Count: 1, P50: 40, P90: 40, P99: 40, Max: 40},
		"reuse":   {Count: 1, P50: 3, P90: 3, P99: 3, Max: 3},
		"pool":    {Count: 3, P50: 5, P90: 40, P99: 40, Max: 40},
	} {
		if got := r.QueueTimes[via]; got != want {
			t.Errorf("served by %s: %+v, want %+v", via, got, want)
		}
	}
	if len(r.QueueTimes) != 4 {
		t.Errorf("queue times by %d ways of serving, want 4: %+v", len(r.QueueTimes), r.QueueTimes)
	}
}
