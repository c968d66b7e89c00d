package provision

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestReuseHandsAReadyInstanceToTheJob(t *testing.T) {
	f := newFixture(t)
	in := f.reusable(small, 1, nil)[0]
	f.queueJobs(small, 100, 1)
	var atNotify domain.Instance
	f.setAgent(func(f *fixture, cloudID string) {
		atNotify = f.Instance(in.ID)
		registerAtOnce(f, cloudID)
	})

	f.serve()

	// Claimed with the guarded transition, bound to the job, with the
	// claim's own deadline, before the agent was woken.
	if atNotify.State != domain.StateClaimed || atNotify.Job != "100" || !atNotify.Deadline.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("instance when its agent was woken: %s job %q deadline %s", atNotify.State, atNotify.Job, atNotify.Deadline)
	}
	// The agent, once woken, finds the runner registered for it.
	if atNotify.RunnerName != domain.RunnerName(in.ID, 100) || atNotify.RunnerConfig == "" {
		t.Fatalf("instance when its agent was woken: runner %q (config set: %t)", atNotify.RunnerName, atNotify.RunnerConfig != "")
	}
	j := f.wantJob(100, domain.JobAssigned, domain.ViaReuse, in.ID)
	if j.RunnerName != domain.RunnerName(in.ID, 100) || j.RunnerID == 0 || !j.AssignedAt.Equal(t0) {
		t.Fatalf("assignment %+v", j)
	}
	f.wantRunner(in.ID, j)
	f.wantState(in.ID, domain.StateRunning)
	if woken := f.wokenIDs(); !slices.Equal(woken, []string{in.CloudID}) {
		t.Fatalf("agents woken: %v", woken)
	}
	if st := f.Stats(domain.QueueLaunch); st != (domain.QueueStats{}) {
		t.Fatalf("launch queue after serving: %+v", st)
	}
	if st := f.Stats(domain.ResourcePoolQueue("small")); st != (domain.QueueStats{}) {
		t.Fatalf("resource pool after reuse: %+v", st)
	}
	if n := f.cloud.Calls()["CreateFleet"]; n != 0 {
		t.Fatalf("%d fleets created although an instance was free", n)
	}
	runners, _ := f.gh.ListRunners(f.Ctx, domain.Scope{Owner: "acme", Repo: "app"})
	if len(runners) != 1 || runners[0].Name != j.RunnerName {
		t.Fatalf("runners %+v", runners)
	}
	m := f.p.metrics
	if counter(t, m.jobs, "reuse") != 1 || counter(t, m.claims, "won") != 1 || counter(t, m.exhausted, "global") != 0 {
		t.Fatal("metrics do not show one reuse from one won claim")
	}
}

func TestClaimIsExclusive(t *testing.T) {
	f := newFixture(t)
	in := f.reusable(small, 1, nil)[0]
	e := entryOf(in)
	const claimers = 8
	var won sync.Map
	var wg sync.WaitGroup
	for i := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got, ok := f.p.claim(f.Ctx, domain.Job{ID: int64(200 + i)}, e, f.p.pickupFor("small")); ok {
				won.Store(i, got)
			}
		}()
	}
	wg.Wait()
	var winners []domain.Instance
	won.Range(func(_, v any) bool { winners = append(winners, v.(domain.Instance)); return true })
	if len(winners) != 1 {
		t.Fatalf("%d claims won, want exactly 1", len(winners))
	}
	got := f.wantState(in.ID, domain.StateClaimed)
	if got.Job != winners[0].Job || got.Version != winners[0].Version {
		t.Fatalf("stored claim %q v%d, winner %q v%d", got.Job, got.Version, winners[0].Job, winners[0].Version)
	}
	if counter(t, f.p.metrics.claims, "won") != 1 || counter(t, f.p.metrics.claims, "lost") != claimers-1 {
		t.Fatal("claim metrics do not add up")
	}
}

func TestTwoRequestsRacingForOneInstanceOneWinsTheOtherMovesOn(t *testing.T) {
	f := newFixture(t)
	in := f.reusable(small, 1, nil)[0]
	f.offer(in) // a stale second entry for the same instance
	f.queueJobs(small, 100, 2)

	f.serve()

	a, b := f.Job(100), f.Job(101)
	if a.Status != domain.JobAssigned || b.Status != domain.JobAssigned {
		t.Fatalf("jobs %s, %s; both should be served", a.Status, b.Status)
	}
	vias := []domain.Via{a.Via, b.Via}
	slices.Sort(vias)
	if !slices.Equal(vias, []domain.Via{domain.ViaCold, domain.ViaReuse}) {
		t.Fatalf("via %v: one reuse and one cold start expected", vias)
	}
	if counter(t, f.p.metrics.claims, "won") != 1 || counter(t, f.p.metrics.claims, "lost") != 1 {
		t.Fatal("want one won and one lost claim")
	}
	if st := f.Stats(domain.ResourcePoolQueue("small")); st != (domain.QueueStats{}) {
		t.Fatalf("the losing entry was kept: %+v", st)
	}
}

func TestPostClaimHeartbeatCheck(t *testing.T) {
	tests := []struct {
		name      string
		heartbeat time.Time
		pass      bool
	}{
		{"fresh", t0, true},
		{"exactly at the limit", t0.Add(-15 * time.Second), true},
		{"stale", t0.Add(-16 * time.Second), false},
		{"missing", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			first := f.reusable(small, 1, func(in *domain.Instance) { in.Heartbeat = tt.heartbeat })[0]
			second := f.reusable(small, 1, nil)[0]
			f.queueJobs(small, 100, 1)

			f.serve()

			if tt.pass {
				f.wantJob(100, domain.JobAssigned, domain.ViaReuse, first.ID)
				f.wantState(second.ID, domain.StateReady)
				return
			}
			got := f.wantState(first.ID, domain.StateTerminating)
			if got.Job != "" || !strings.Contains(got.Reason, "heartbeat") {
				t.Fatalf("failed instance: job %q reason %q", got.Job, got.Reason)
			}
			f.wantJob(100, domain.JobAssigned, domain.ViaReuse, second.ID)
			if counter(t, f.p.metrics.postClaim, "failed") != 1 {
				t.Fatal("post-claim failure not counted")
			}
			if woken := f.wokenIDs(); !slices.Equal(woken, []string{second.CloudID}) {
				t.Fatalf("woken %v: an unhealthy instance must not be handed the job", woken)
			}
		})
	}
}

func TestRegistrationCheckTerminatesASilentInstanceAndTriesTheNext(t *testing.T) {
	f := newFixture(t)
	ins := f.reusable(small, 2, nil)
	f.setAgent(silentFor(ins[0].CloudID))
	f.queueJobs(small, 100, 1)
	done := f.serveAsync(f.p, f.receive())

	f.Clock.BlockUntil(2) // the registration deadline and the re-check
	f.Clock.Advance(9 * time.Second)
	f.Clock.BlockUntil(2)
	j := f.wantJob(100, domain.JobAssigned, domain.ViaReuse, ins[0].ID)
	firstRunner := j.RunnerID
	f.Clock.Advance(time.Second) // the default 10 s registration timeout
	<-done

	got := f.wantState(ins[0].ID, domain.StateTerminating)
	if !strings.Contains(got.Reason, "did not register") {
		t.Fatalf("reason %q", got.Reason)
	}
	f.wantRunner(ins[1].ID, f.wantJob(100, domain.JobAssigned, domain.ViaReuse, ins[1].ID))
	f.wantState(ins[1].ID, domain.StateRunning)
	runners, _ := f.gh.ListRunners(f.Ctx, domain.Scope{Owner: "acme", Repo: "app"})
	for _, r := range runners {
		if r.ID == firstRunner {
			t.Fatalf("the silent instance's runner registration %d was left behind", firstRunner)
		}
	}
	if counter(t, f.p.metrics.postClaim, "failed") != 1 || counter(t, f.p.metrics.jobs, "reuse") != 1 {
		t.Fatal("metrics do not show one failed post-claim check and one reuse")
	}
	if f.Clock.Pending() != 0 {
		t.Fatalf("%d timers left on the clock", f.Clock.Pending())
	}
}

func TestRegistrationTimeoutIsConfigurable(t *testing.T) {
	f := newFixture(t, withOptions(func(o *Options) { o.RegistrationTimeout = 3 * time.Second }))
	in := f.reusable(small, 1, nil)[0]
	f.setAgent(silentFor(in.CloudID))
	f.queueJobs(small, 100, 1)
	done := f.serveAsync(f.p, f.receive())
	f.Clock.BlockUntil(2)
	f.Clock.Advance(3 * time.Second)
	<-done
	f.wantState(in.ID, domain.StateTerminating)
	// No candidate was left, so the job got a new instance.
	j := f.Job(100)
	if j.Status != domain.JobAssigned || j.Via != domain.ViaCold || j.InstanceID == in.ID {
		t.Fatalf("job %s via %q on %q: %s", j.Status, j.Via, j.InstanceID, j.Reason)
	}
}

func TestManyConcurrentJobsNeverShareAnInstance(t *testing.T) {
	f := newFixture(t)
	ins := f.reusable(small, 4, nil)
	for _, in := range ins {
		f.offer(in) // stale duplicates make claims race
	}
	const n = 40
	f.queueJobs(small, 1000, n)
	msgs := f.receive()
	other := f.newProvisioner(nil, Options{ControllerID: "ctl-test", Wait: -1})
	a := f.serveAsync(f.p, msgs[:n/2])
	b := f.serveAsync(other, msgs[n/2:])
	<-a
	<-b

	byInstance := map[string]int64{}
	reused := 0
	for id := int64(1000); id < 1000+n; id++ {
		j := f.Job(id)
		if j.Status != domain.JobAssigned || j.InstanceID == "" {
			t.Fatalf("job %d: %s %q (%s)", id, j.Status, j.InstanceID, j.Reason)
		}
		if prev, taken := byInstance[j.InstanceID]; taken {
			t.Fatalf("instance %s serves jobs %d and %d", j.InstanceID, prev, id)
		}
		byInstance[j.InstanceID] = id
		if in := f.Instance(j.InstanceID); in.Job != j.Key() || in.State != domain.StateRunning {
			t.Fatalf("instance %s: %s bound to %q, job %d", in.ID, in.State, in.Job, id)
		}
		f.wantRunner(j.InstanceID, j)
		if j.Via == domain.ViaReuse {
			reused++
		}
	}
	if reused != len(ins) {
		t.Fatalf("%d jobs reused an instance, want %d (every free one)", reused, len(ins))
	}
	won := counter(t, f.p.metrics.claims, "won") + counter(t, other.metrics.claims, "won")
	if won != float64(len(ins)) {
		t.Fatalf("%v claims won, want %d", won, len(ins))
	}
	if st := f.Stats(domain.QueueLaunch); st != (domain.QueueStats{}) {
		t.Fatalf("launch queue %+v", st)
	}
	if live := f.Instances(domain.InstanceFilter{States: []domain.State{domain.StateRunning}}); len(live) != n {
		t.Fatalf("%d running instances for %d jobs", len(live), n)
	}
}

// A reused instance of a pool launched with another spec than the pool's
// current one (before an image roll) does not serve: it is retired after
// its claim and the search goes on, to an instance of the current spec.
// The dispatcher passes such instances over; reuse from the launch queue
// handed them jobs ahead of the rolled members.
func TestReuseRetiresAnInstanceOfAnOutdatedSpec(t *testing.T) {
	f := newFixture(t, func(_ *fixture, d *Deps, _ *Options) {
		d.SpecHash = func(_ context.Context, pool string) string {
			if pool == "p" {
				return "rolled"
			}
			return ""
		}
	})
	stale := f.reusable(small, 1, func(i *domain.Instance) { i.Pool, i.SpecHash = "p", "before-the-roll" })[0]
	f.Clock.Advance(time.Second) // the current one comes second
	current := f.reusable(small, 1, func(i *domain.Instance) { i.Pool, i.SpecHash = "p", "rolled" })[0]
	f.queueJobs(small, 100, 1)

	f.serve()

	f.wantJob(100, domain.JobAssigned, domain.ViaReuse, current.ID)
	out := f.wantState(stale.ID, domain.StateTerminating)
	if out.Job != "" || !strings.Contains(out.Reason, "outdated") {
		t.Fatalf("outdated instance left bound to %q, reason %q", out.Job, out.Reason)
	}
	if n := f.cloud.Calls()["CreateFleet"]; n != 0 {
		t.Fatalf("%d fleets although an instance of the current spec was idle", n)
	}
	if counter(t, f.p.metrics.postClaim, "outdated") != 1 || counter(t, f.p.metrics.postClaim, "failed") != 0 {
		t.Fatal("the outdated instance must be counted so, not as failing its checks")
	}
}

// The jobs whose search found nothing are launched for at once, not once
// a reused instance slow to register (up to its registration timeout) has
// answered or failed.
func TestColdStartsDoNotWaitForASlowReusedInstance(t *testing.T) {
	var rc *recordingCloud
	f := newFixture(t, withRecordingCloud(&rc))
	slow := f.reusable(small, 1, nil)[0]
	f.setAgent(silentFor(slow.CloudID))
	asked := make(chan time.Time, 2)
	rc.onCreate = func(domain.LaunchSpec) { asked <- f.Clock.Now() }
	f.queueJobs(small, 100, 5)

	done := f.serveAsync(f.p, f.receive())
	select {
	case at := <-asked:
		if !at.Equal(t0) {
			t.Fatalf("the cold starts were asked for at %s, after the slow instance's wait", at)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no fleet asked for while a reused instance registers")
	}
	f.Clock.BlockUntil(2) // the slow instance's registration wait
	f.Clock.Advance(f.p.opts.RegistrationTimeout)
	<-done

	if got := rc.fleets(); !slices.Equal(got, []int{4, 1}) {
		t.Fatalf("fleet requests %v, want the 4 cold starts, then the slow instance's job", got)
	}
	for id := int64(100); id < 105; id++ {
		if j := f.Job(id); j.Status != domain.JobAssigned || j.Via != domain.ViaCold {
			t.Fatalf("job %d: %s via %q (%s)", id, j.Status, j.Via, j.Reason)
		}
	}
	f.wantState(slow.ID, domain.StateTerminating)
}
