package agents_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
)

func TestFinishAppliesThePoolPolicy(t *testing.T) {
	cases := []struct {
		name      string
		policy    agents.Policy
		state     domain.State
		served    int           // jobs served before this one
		age       time.Duration // since the row was created
		want      domain.State
		wantWhy   string
		wantAwake bool
	}{
		{"reuse releases", agents.Policy{Reuse: true}, domain.StateRunning, 0, 0, domain.StateReleasing, "", true},
		{"no reuse terminates", agents.Policy{}, domain.StateRunning, 0, 0, domain.StateTerminating, "job done", false},
		{"below max jobs releases", agents.Policy{Reuse: true, MaxJobs: 3}, domain.StateRunning, 1, 0, domain.StateReleasing, "", true},
		{"max jobs retires", agents.Policy{Reuse: true, MaxJobs: 3}, domain.StateRunning, 2, 0, domain.StateTerminating, "served 3 jobs (max-jobs-per-instance)", false},
		{"younger than max age releases", agents.Policy{Reuse: true, MaxAge: time.Hour}, domain.StateRunning, 0, 59 * time.Minute, domain.StateReleasing, "", true},
		{"max age retires", agents.Policy{Reuse: true, MaxAge: time.Hour}, domain.StateRunning, 0, time.Hour, domain.StateTerminating, "older than max-age", false},
		{"never registered (claimed) terminates", agents.Policy{Reuse: true}, domain.StateClaimed, 0, 0, domain.StateTerminating, "job ended before its runner registered", false},
		{"never registered (cold start) terminates", agents.Policy{Reuse: true}, domain.StateBooting, 0, 0, domain.StateTerminating, "job ended before its runner registered", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.policy = tc.policy
			f.CreateInstance(domain.Instance{ID: "bp-1", State: tc.state, Job: "42", JobStarted: tc.state == domain.StateRunning, JobsServed: tc.served,
				RunnerName: runnerOf("bp-1", 42), RunnerConfig: configOf("bp-1")})
			f.createJob(domain.Job{ID: 42, Status: domain.JobRunning, InstanceID: "bp-1", RunnerName: runnerOf("bp-1", 42)})
			f.Clock.Advance(tc.age)
			if err := f.svc.Finish(f.Ctx, 42, "success"); err != nil {
				t.Fatal(err)
			}
			in := f.Instance("bp-1")
			if in.State != tc.want || in.Reason != tc.wantWhy || in.Job != "" || in.JobStarted || in.JobsServed != tc.served+1 {
				t.Fatalf("got %s (%q) job %q started=%v served %d; want %s (%q), unbound, served %d",
					in.State, in.Reason, in.Job, in.JobStarted, in.JobsServed, tc.want, tc.wantWhy, tc.served+1)
			}
			f.wantNoRunner("bp-1") // spent, whatever becomes of the instance
			f.wantDefaultDeadline(in)
			if awake := slices.Equal(f.notifications(), []string{"i-bp-1"}); awake != tc.wantAwake {
				t.Fatalf("notified %v, want the agent woken: %v", f.notifications(), tc.wantAwake)
			}
			j := f.Job(42)
			if j.Status != domain.JobCompleted || j.Conclusion != "success" || !j.CompletedAt.Equal(f.Clock.Now()) {
				t.Fatalf("job %s (%q) at %s, want completed", j.Status, j.Conclusion, j.CompletedAt)
			}
		})
	}
}

func TestFinishRepeatedIsHarmless(t *testing.T) {
	f := newFixture(t)
	f.policy = agentsPolicy(true, 0)
	f.bound("bp-1", domain.StateRunning, 42)
	if err := f.svc.Finish(f.Ctx, 42, "success"); err != nil {
		t.Fatal(err)
	}
	in, j := f.Instance("bp-1"), f.Job(42)
	f.Clock.Advance(time.Second)
	if err := f.svc.Finish(f.Ctx, 42, "failure"); err != nil {
		t.Fatal(err)
	}
	f.WantUnchanged(in)
	if again := f.Job(42); again.Version != j.Version || again.Conclusion != "success" {
		t.Fatalf("repeat changed the job: v%d %q → v%d %q", j.Version, j.Conclusion, again.Version, again.Conclusion)
	}
	if n := len(f.notifications()); n != 1 {
		t.Fatalf("agent woken %d times, want once", n)
	}
}

func TestFinishWithoutAnInstance(t *testing.T) {
	f := newFixture(t)
	f.createJob(domain.Job{ID: 42})
	if err := f.svc.Finish(f.Ctx, 42, "cancelled"); err != nil {
		t.Fatal(err)
	}
	if j := f.Job(42); j.Status != domain.JobCompleted || j.Conclusion != "cancelled" {
		t.Fatalf("cancelled job %s (%q), want completed", j.Status, j.Conclusion)
	}
	if err := f.svc.Finish(f.Ctx, 99, "success"); err != nil {
		t.Fatalf("a job bullpen never saw: %v", err)
	}
	rejected := f.createJob(domain.Job{ID: 43, Status: domain.JobRejected, Reason: "no pool"})
	if err := f.svc.Finish(f.Ctx, 43, "cancelled"); err != nil {
		t.Fatal(err)
	}
	if j := f.Job(43); j.Version != rejected.Version || j.Status != domain.JobRejected {
		t.Fatalf("rejected job became %s", j.Status)
	}
}

// An instance being terminated keeps its job field for the record;
// finishing the job must neither fail (the webhook would be retried
// forever) nor revive the row.
func TestFinishLeavesInstancesBeingTerminated(t *testing.T) {
	for _, st := range []domain.State{domain.StateTerminating, domain.StateTerminated} {
		t.Run(string(st), func(t *testing.T) {
			f := newFixture(t)
			f.policy = agentsPolicy(true, 0)
			before := f.CreateInstance(domain.Instance{ID: "bp-1", State: st, Job: "42", JobStarted: true, Reason: "reaped"})
			f.createJob(domain.Job{ID: 42, Status: domain.JobRunning, InstanceID: "bp-1"})
			if err := f.svc.Finish(f.Ctx, 42, "failure"); err != nil {
				t.Fatal(err)
			}
			f.WantUnchanged(before)
			if j := f.Job(42); j.Status != domain.JobCompleted {
				t.Fatalf("job %s, want completed", j.Status)
			}
		})
	}
}

// An instance that failed during its job goes once the job is over, for
// the reason it failed, and is never pooled.
func TestFinishTerminatesAnInstanceThatFailedDuringItsJob(t *testing.T) {
	f := newFixture(t)
	f.policy = agentsPolicy(true, 0)
	f.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateError, Job: "42", JobStarted: true, Reason: "disk full"})
	f.createJob(domain.Job{ID: 42, Status: domain.JobRunning, InstanceID: "bp-1"})
	if err := f.svc.Finish(f.Ctx, 42, "failure"); err != nil {
		t.Fatal(err)
	}
	if in := f.Instance("bp-1"); in.State != domain.StateTerminating || in.Reason != "disk full" || in.Job != "" {
		t.Fatalf("got %s (%q) bound to %q, want terminating for the failure, unbound", in.State, in.Reason, in.Job)
	}
	if n := len(f.notifications()); n != 0 {
		t.Fatalf("failed instance told to release %d times", n)
	}
}

// racingStore is the real store with another writer that changes the
// instance (as the in_progress webhook's protection does) right after
// each of the first n reads, so the release's guarded write loses.
type racingStore struct {
	*sqlite.Store
	n int
}

func (s *racingStore) GetInstance(ctx context.Context, id string) (domain.Instance, error) {
	in, err := s.Store.GetInstance(ctx, id)
	if err == nil && s.n > 0 {
		s.n--
		_, err = s.Store.Transition(ctx, id, domain.GuardOf(in), func(x *domain.Instance) { x.JobStarted = true })
	}
	return in, err
}

func TestFinishRetriesALostRace(t *testing.T) {
	f := newFixture(t)
	f.bound("bp-1", domain.StateRunning, 42)
	racing := &racingStore{Store: f.Store, n: 2}
	svc, err := agents.New(racing, f.Queue, f.Clock, f.Log, nil, agents.Options{
		Policy: func(domain.Instance) agents.Policy { return agentsPolicy(true, 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Finish(f.Ctx, 42, "success"); err != nil {
		t.Fatal(err)
	}
	if in := f.Instance("bp-1"); in.State != domain.StateReleasing || in.Job != "" {
		t.Fatalf("after a lost race the instance is %s bound to %q, want releasing", in.State, in.Job)
	}
}

// The release end to end: the job's end clears the job (the trigger), the
// agent is told to release, deregisters, and the instance is pooled and
// can be claimed for the next job.
func TestReleaseHandshake(t *testing.T) {
	f := newFixture(t)
	f.policy = agentsPolicy(true, 5*time.Minute)
	in, _ := f.bound("bp-1", domain.StateRunning, 42)
	if err := f.svc.Finish(f.Ctx, 42, "success"); err != nil {
		t.Fatal(err)
	}
	f.wantNoRunner("bp-1")
	next, err := f.svc.Next(f.Ctx, in.CloudID)
	if err != nil || next.Kind != domain.InstructionRelease || next.Assignment.JITConfig != "" {
		t.Fatalf("next: %s (config set: %t) %v, want release", next.Kind, next.Assignment.JITConfig != "", err)
	}
	f.Clock.Advance(10 * time.Second)
	if err := f.signal(in, domain.SignalDeregistered, ""); err != nil {
		t.Fatal(err)
	}
	entries := f.ResourcePool("small")
	if len(entries) != 1 || entries[0].InstanceID != "bp-1" {
		t.Fatalf("resource pool: %+v", entries)
	}
	claimed, err := f.Store.Transition(f.Ctx, "bp-1", domain.Guard{State: domain.StateReady}, func(x *domain.Instance) {
		x.State, x.Job = domain.StateClaimed, "43"
	})
	if err != nil {
		t.Fatalf("claim the released instance: %v", err)
	}
	if claimed.JobsServed != 1 {
		t.Fatalf("jobs served %d, want 1", claimed.JobsServed)
	}
	// Claimed, but its next runner is not recorded yet: nothing to start.
	if next, err := f.svc.Next(f.Ctx, in.CloudID); err != nil || next.Kind != domain.InstructionWait {
		t.Fatalf("next after the new claim: %s %v, want wait", next.Kind, err)
	}
}

// The agent's report of its runner's exit often ends a job before GitHub's
// completed delivery does: the job then takes GitHub's conclusion, and
// nothing else changes; a second delivery changes nothing.
func TestGitHubsConclusionFollowsTheAgentsReport(t *testing.T) {
	f := newFixture(t)
	f.finishedByItsAgent(t)
	ended := f.Job(42)
	if ended.Status != domain.JobCompleted || ended.Conclusion != "" {
		t.Fatalf("after the agent's report: job %s (%q), want completed, no conclusion yet", ended.Status, ended.Conclusion)
	}
	f.Clock.Advance(2 * time.Second)
	for _, conclusion := range []string{"failure", "success"} {
		if err := f.svc.Finish(f.Ctx, 42, conclusion); err != nil {
			t.Fatalf("GitHub's completed delivery (%s): %v", conclusion, err)
		}
	}
	got, want := f.Job(42), ended
	want.Conclusion, want.Version, want.UpdatedAt = "failure", ended.Version+1, f.Clock.Now()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after GitHub's deliveries:\n%+v\nwant the agent's completion with GitHub's first conclusion:\n%+v", got, want)
	}
}
