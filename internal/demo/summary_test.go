package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// A pool whose ready and stopped counts match its target but which holds a
// member on its way out is not at target, and the summary says which
// member keeps it from it; the jobs that have no queue time are counted
// by status, so that the rows add up to the jobs fed.
func TestTheSummaryAccountsForEveryMemberAndJob(t *testing.T) {
	ctx := context.Background()
	w := onePoolWorld(t)
	member := func(id string, st domain.State) domain.Instance {
		return domain.Instance{ID: id, CloudID: "i-" + id, Pool: "p", Role: domain.RoleHot, Runner: "small", SpecHash: "spec",
			State: st, CreatedAt: monday, UpdatedAt: monday, StateSince: monday}
	}
	if err := w.a.Store.CreateInstances(ctx, []domain.Instance{member("a", domain.StateReady), member("b", domain.StateTerminating)}); err != nil {
		t.Fatal(err)
	}
	job := func(id int64, st domain.JobStatus, via domain.Via) domain.Job {
		j := domain.Job{ID: id, RunID: id, RunAttempt: 1, Repo: "acme/app", Status: st, Via: via,
			CreatedAt: monday, UpdatedAt: monday, QueuedAt: monday}
		if via != "" {
			j.StartedAt = monday.Add(3 * time.Second)
		}
		return j
	}
	if _, err := w.a.Store.CreateJobs(ctx, []domain.Job{
		job(1, domain.JobCompleted, domain.ViaPool), job(2, domain.JobRunning, domain.ViaCold),
		job(3, domain.JobQueued, ""), job(4, domain.JobAssigned, ""), job(5, domain.JobQueued, ""),
	}); err != nil {
		t.Fatal(err)
	}
	last := converger.Report{At: monday, Pools: []converger.PoolReport{{Pool: "p", Schedule: "default", SpecHash: "spec",
		Target: domain.Target{Hot: 1}}}}
	res, err := w.result(ctx, Result{Cycles: 1}, last, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p := res.Pools[0]
	if p.ReadyHot != 1 || p.Other != 1 || p.AtTarget || p.OtherStates["terminating"] != 1 {
		t.Fatalf("pool %+v: want 1/1 hot, one other terminating, not at target", p)
	}
	if got := res.Jobs.NotStarted; len(got) != 2 || got["queued"] != 2 || got["assigned"] != 1 {
		t.Errorf("not started %v, want 2 queued and 1 assigned", got)
	}

	var out bytes.Buffer
	Summary(&out, res)
	for _, want := range []string{
		"p              default           hot 1/1  stopped 0/0  warming 0  serving jobs 0  other 1 (terminating)  — not at target yet",
		"jobs: 5 fed;",
		"  pool     1 jobs",
		"  cold     1 jobs",
		"  not started: 2 queued, 1 waiting for their runner\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "warning") {
		t.Errorf("a summary without warnings warns:\n%s", out.String())
	}
}

// A pool of several members on their way out names each state.
func TestOtherMembersAreCountedByState(t *testing.T) {
	p := PoolResult{OtherStates: map[string]int{"terminating": 2, "stopping": 1}}
	p.Other = 3
	if got := otherCount(p); got != "  other 3 (1 stopping, 2 terminating)" {
		t.Errorf("otherCount = %q", got)
	}
	if got := otherCount(PoolResult{}); got != "" {
		t.Errorf("otherCount of none = %q", got)
	}
}
