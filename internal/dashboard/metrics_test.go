package dashboard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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

// stallingStore holds its instance listings while stalled, until released
// or until the read gives up: a store that has become slow.
type stallingStore struct {
	Store
	stalled atomic.Pointer[chan struct{}] // nil: answers at once
	held    chan struct{}                 // a value each time a listing is held
}

// stall holds every listing from now on; release lets them through.
func (s *stallingStore) stall() (release func()) {
	select {
	case <-s.held: // noted by an earlier stall
	default:
	}
	ch := make(chan struct{})
	s.stalled.Store(&ch)
	return func() {
		s.stalled.Store(nil)
		close(ch)
	}
}

func (s *stallingStore) ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error) {
	if ch := s.stalled.Load(); ch != nil {
		select {
		case s.held <- struct{}{}:
		default:
		}
		select {
		case <-*ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.ListInstances(ctx, f)
}

// scrapeWhileTheStoreStalls gathers the registry while a read of the store
// hangs: the scrape must park on the dashboard's clock, which is then moved
// past scrapeWait, and answer. It returns what the scrape served. The wall
// clock only bounds a failure.
func (r *rig) scrapeWhileTheStoreStalls() prometheus.Gatherer {
	r.t.Helper()
	type scrape struct {
		families []*dto.MetricFamily
		err      error
	}
	gathered := make(chan scrape, 1)
	go func() {
		families, err := r.reg.Gather()
		gathered <- scrape{families, err}
	}()
	parked := make(chan struct{})
	go func() {
		r.clk.BlockUntil(1)
		close(parked)
	}()
	select {
	case <-parked:
	case <-time.After(10 * time.Second):
		r.t.Fatal("the scrape waits on the store, not for at most scrapeWait on the clock")
	}
	r.clk.Advance(scrapeWait)
	select {
	case s := <-gathered:
		return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return s.families, s.err })
	case <-time.After(10 * time.Second):
		r.t.Fatal("the scrape still waits once scrapeWait has passed")
	}
	return nil
}

// A store that has become slow does not hold a scrape beyond scrapeWait: a
// scrape outlasting Prometheus' timeout loses every metric of the replica,
// which is then reported down. The scrape serves the snapshot in hand and
// its age; the read goes on, one for every caller, and a later scrape
// serves what it found. A read stuck past staleGaugesAfter leaves the
// gauges out, as a failed one does.
func TestASlowStoreDoesNotHoldTheScrape(t *testing.T) {
	t.Parallel()
	var st *stallingStore
	r := newRig(t, func(o *Options) { st = &stallingStore{Store: o.Store, held: make(chan struct{}, 1)}; o.Store = st })
	r.seed()
	queued := func(g prometheus.Gatherer) (float64, bool) {
		return promtest.Value(t, g, "bullpen_jobs", "status", "queued")
	}
	age := func(g prometheus.Gatherer) float64 {
		return promtest.MustValue(t, g, "bullpen_dashboard_snapshot_age_seconds")
	}
	if got, _ := queued(r.reg); got != 1 {
		t.Fatalf("%v queued jobs before the store slows down, want 1", got)
	}
	newJob := func(id int64) {
		r.createJobs(domain.Job{ID: id, RunID: id * 10, RunAttempt: 1, Repo: "acme/app", Name: "build", Workflow: "CI",
			Labels: []string{"runs-on=1/pool=small-x64"}, Route: domain.RoutePool, Pool: "small-x64", Runner: "small",
			Status: domain.JobQueued, QueuedAt: r.clk.Now()})
	}

	newJob(301)
	release := st.stall()
	r.later()
	stale := r.scrapeWhileTheStoreStalls()
	if got, ok := queued(stale); !ok || got != 1 {
		t.Errorf("a slow store: %v queued jobs (served %t), want the snapshot in hand's 1", got, ok)
	}
	if got, ok := promtest.Value(t, stale, "bullpen_pool_ready_instances", "pool", "small-x64", "role", "hot"); !ok || got != 1 {
		t.Errorf("a slow store: %v ready hot instances (served %t), want the snapshot in hand's 1", got, ok)
	}
	if got, want := age(stale), (DefaultRefresh + scrapeWait).Seconds(); got != want {
		t.Errorf("a slow store: snapshot age %v s, want %v s", got, want)
	}
	release()
	if _, err := r.d.cache.get(r.ctx); err != nil { // waits for the read in progress
		t.Fatal(err)
	}
	if got, _ := queued(r.reg); got != 2 {
		t.Errorf("once the read ends: %v queued jobs, want 2", got)
	}
	if got, want := age(r.reg), scrapeWait.Seconds(); got != want {
		t.Errorf("once the read ends: snapshot age %v s, want %v s, from when the read began", got, want)
	}

	newJob(302)
	release = st.stall()
	r.later()
	r.scrapeWhileTheStoreStalls()
	// The read the scrape began counts its query as it starts, which a
	// busy machine may run after the scrape gave up waiting for it.
	select {
	case <-st.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the scrape began no read of the store")
	}
	reads := r.d.StoreQueries()
	again := r.scrapeWhileTheStoreStalls()
	if got, ok := queued(again); !ok || got != 2 {
		t.Errorf("a second scrape while the read goes on: %v queued jobs (served %t), want 2", got, ok)
	}
	if n := r.d.StoreQueries() - reads; n != 0 {
		t.Errorf("a second scrape made %d store queries, want none: it waits for the read in progress", n)
	}
	r.clk.Advance(staleGaugesAfter)
	stuck := r.scrapeWhileTheStoreStalls()
	if got, ok := queued(stuck); ok {
		t.Errorf("a read stuck past %v: %v queued jobs served, want none", staleGaugesAfter, got)
	}
	// The snapshot in hand is the one whose read began at the first stall.
	if got, want := age(stuck), r.clk.Now().Sub(t0.Add(DefaultRefresh)).Seconds(); got != want {
		t.Errorf("a read stuck past %v: snapshot age %v s, want %v s", staleGaugesAfter, got, want)
	}
	release()
	if _, err := r.d.cache.get(r.ctx); err != nil { // waits for the stuck read, whose snapshot is too old to serve
		t.Fatal(err)
	}
	if got, _ := queued(r.reg); got != 3 {
		t.Errorf("once the store answers again: %v queued jobs, want 3", got)
	}
}
