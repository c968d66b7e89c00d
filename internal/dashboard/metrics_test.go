package dashboard

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/promtest"
)

// oldestWait reads bullpen_job_oldest_queued_seconds by pool.
func (r *rig) oldestWait() map[string]float64 {
	r.t.Helper()
	families, err := r.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	waits := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "bullpen_job_oldest_queued_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" {
					waits[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return waits
}

// A job assigned to an instance whose runner never comes up still waits for
// a runner, from when GitHub queued it; so does one sent back to the queue
// and assigned again, without starting over. Jobs that started, and jobs
// GitHub holds for an approval, do not wait for a runner.
func TestOldestWaitCountsJobsNotYetStarted(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job := func(id int64, pool string, queued time.Time, edit func(*domain.Job)) domain.Job {
		j := domain.Job{ID: id, RunID: id * 10, RunAttempt: 1, Repo: "acme/app", Name: "build", Workflow: "CI",
			Labels: []string{"runs-on=1/pool=" + pool}, Route: domain.RoutePool, Pool: pool, Runner: "small",
			Status: domain.JobQueued, QueuedAt: queued}
		edit(&j)
		return j
	}
	r.createJobs(
		job(201, "small-x64", t0.Add(-12*time.Minute), func(j *domain.Job) {
			j.Status, j.InstanceID, j.Via, j.AssignedAt = domain.JobAssigned, "bp-hot1", domain.ViaPool, t0.Add(-11*time.Minute)
		}),
		job(202, "small-x64", t0.Add(-30*time.Minute), func(j *domain.Job) { j.Reason = domain.ReasonWaitingForApproval }),
		job(203, "small-x64", t0.Add(-40*time.Minute), func(j *domain.Job) {
			j.Status, j.InstanceID, j.Via = domain.JobRunning, "bp-hot2", domain.ViaPool
			j.AssignedAt, j.StartedAt = t0.Add(-39*time.Minute), t0.Add(-38*time.Minute)
		}),
		job(204, "burst", t0.Add(-15*time.Minute), func(j *domain.Job) {
			j.Status, j.InstanceID, j.Via, j.AssignedAt = domain.JobAssigned, "bp-cold1", domain.ViaCold, t0.Add(-14*time.Minute)
		}),
	)
	if got := r.oldestWait(); got["small-x64"] != 12*60 || got["burst"] != 15*60 {
		t.Fatalf("oldest waits %v, want small-x64 12 min (assigned, not started) and burst 15 min", got)
	}
	// The burst job's machine is not created in time: it goes back to the
	// queue for its backoff, then to another instance.
	requeue := func(to domain.JobStatus) {
		t.Helper()
		cur, err := r.store.GetJob(r.ctx, 204)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.store.TransitionJob(r.ctx, 204, domain.JobGuardOf(cur), func(j *domain.Job) {
			switch to {
			case domain.JobQueued:
				j.Status, j.InstanceID, j.Via, j.AssignedAt, j.Reason = domain.JobQueued, "", "", time.Time{}, "instance creation timed out"
			default:
				j.Status, j.InstanceID, j.Via, j.AssignedAt, j.Reason = domain.JobAssigned, "bp-cold2", domain.ViaCold, r.clk.Now(), ""
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		r.later()
	}
	for _, to := range []domain.JobStatus{domain.JobQueued, domain.JobAssigned} {
		requeue(to)
		want := r.clk.Now().Sub(t0.Add(-15 * time.Minute)).Seconds()
		if got := r.oldestWait()["burst"]; got != want {
			t.Errorf("burst job %s again: oldest wait %v s, want %v s since GitHub queued it", to, got, want)
		}
	}
}

// Jobs held for an approval wait for a reviewer, days sometimes, not for a
// runner: bullpen_jobs counts them apart, as the jobs page does, and queued
// keeps the jobs a runner would serve.
func TestJobsGaugeCountsJobsHeldForAnApprovalApart(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.seed() // 101 queued, 102 assigned, 103 running
	r.createJobs(domain.Job{ID: 301, RunID: 3010, RunAttempt: 1, Repo: "acme/app", Name: "deploy", Workflow: "CD",
		Labels: []string{"runs-on=1/pool=small-x64"}, Route: domain.RoutePool, Pool: "small-x64", Runner: "small",
		Status: domain.JobQueued, QueuedAt: t0.Add(-72 * time.Hour), Reason: domain.ReasonWaitingForApproval})
	for status, want := range map[string]float64{"queued": 1, "held": 1, "assigned": 1, "running": 1} {
		if got, ok := promtest.Value(t, r.reg, "bullpen_jobs", "status", status); !ok || got != want {
			t.Errorf("bullpen_jobs{status=%q} %v (served %t), want %v", status, got, ok, want)
		}
	}
}
