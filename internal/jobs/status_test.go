package jobs_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
)

func assigned() domain.Job {
	return domain.Job{
		Status: domain.JobAssigned, Route: domain.RouteLaunch, Via: domain.ViaReuse, InstanceID: "bp-1",
		RunnerName: "bp-1-42", RunnerID: 7, AssignedAt: t0, Attempts: 1,
	}
}

func TestMarkRunning(t *testing.T) {
	at := t0.Add(time.Minute)
	cases := []struct {
		name       string
		job        domain.Job
		runner     string
		wantStatus domain.JobStatus
		wantRunner string
		changed    bool
	}{
		{"queued", domain.Job{Status: domain.JobQueued}, "gh-runner", domain.JobRunning, "gh-runner", true},
		{"assigned keeps its runner name when none is given", assigned(), "", domain.JobRunning, "bp-1-42", true},
		{"already running", domain.Job{Status: domain.JobRunning, RunnerName: "a"}, "b", domain.JobRunning, "a", false},
		{"completed", domain.Job{Status: domain.JobCompleted}, "b", domain.JobCompleted, "", false},
		{"rejected", domain.Job{Status: domain.JobRejected}, "b", domain.JobRejected, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			before := f.createJob(tc.job)
			if err := jobs.MarkRunning(f.Ctx, f.Store, 42, at, tc.runner); err != nil {
				t.Fatal(err)
			}
			j := f.Job(42)
			if j.Status != tc.wantStatus || j.RunnerName != tc.wantRunner || (j.Version != before.Version) != tc.changed {
				t.Fatalf("got %s by %q v%d (from v%d), want %s by %q, changed %v",
					j.Status, j.RunnerName, j.Version, before.Version, tc.wantStatus, tc.wantRunner, tc.changed)
			}
			if tc.changed && !j.StartedAt.Equal(at) {
				t.Fatalf("started at %s, want %s", j.StartedAt, at)
			}
		})
	}
	t.Run("unknown job", func(t *testing.T) {
		f := newFixture(t)
		if err := jobs.MarkRunning(f.Ctx, f.Store, 99, at, ""); err != nil {
			t.Fatalf("a job bullpen never saw: %v", err)
		}
	})
}

func TestRequeue(t *testing.T) {
	for _, route := range []domain.Route{domain.RouteLaunch, domain.RoutePool} {
		t.Run(string(route), func(t *testing.T) {
			f := newFixture(t)
			j := assigned()
			j.Route = route
			f.createJob(j)
			if err := jobs.Requeue(f.Ctx, f.Store, f.Queue, 42, "bp-1", "instance failed: boom"); err != nil {
				t.Fatal(err)
			}
			got := f.Job(42)
			if got.Status != domain.JobQueued || got.Reason != "instance failed: boom" || got.Attempts != 2 ||
				got.InstanceID != "" || got.RunnerName != "" || got.RunnerID != 0 ||
				got.Via != "" || !got.AssignedAt.IsZero() || got.Route != route {
				t.Fatalf("got %+v, want queued, unbound, attempt 2, same route", got)
			}
			wantRequeueMessage(t, f, jobs.QueueFor(route))
		})
	}
}

// wantRequeueMessage checks that the job waits its attempt's RetryDelay in
// queue, once.
func wantRequeueMessage(t *testing.T, f *fixture, queue string) {
	t.Helper()
	if st := f.Stats(queue); st.Delayed != 1 || st.Visible != 0 {
		t.Fatalf("%s queue %+v; want one delayed message", queue, st)
	}
	delay := jobs.RetryDelay(f.Job(42).Attempts)
	f.Clock.Advance(delay - time.Millisecond)
	if st := f.Stats(queue); st.Visible != 0 {
		t.Fatalf("%s queue %+v before the job's delay of %s", queue, st, delay)
	}
	f.Clock.Advance(time.Millisecond)
	msgs, err := f.Queue.Receive(f.Ctx, queue, 10, time.Minute, 0)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("after the delay: %d messages, %v", len(msgs), err)
	}
	if id, err := jobs.Decode(msgs[0].Body); err != nil || id != 42 {
		t.Fatalf("message for job %d, %v", id, err)
	}
}

func TestRequeueOnlyFromTheAssignedInstance(t *testing.T) {
	cases := []struct {
		name string
		job  domain.Job
	}{
		{"assigned to another instance", assigned()},
		{"started", domain.Job{Status: domain.JobRunning, InstanceID: "bp-2"}},
		{"completed", domain.Job{Status: domain.JobCompleted, InstanceID: "bp-2"}},
	}
	t.Run("no longer stored", func(t *testing.T) {
		f := newFixture(t)
		if err := jobs.Requeue(f.Ctx, f.Store, f.Queue, 99, "bp-1", "instance failed"); err != nil {
			t.Fatalf("an unknown job: %v", err)
		}
		if msgs := f.messages(domain.QueueLaunch); len(msgs) != 0 {
			t.Fatalf("sent %d messages for an unknown job", len(msgs))
		}
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.job.InstanceID = "bp-2"
			before := f.createJob(tc.job)
			if err := jobs.Requeue(f.Ctx, f.Store, f.Queue, 42, "bp-1", "instance failed"); err != nil {
				t.Fatal(err)
			}
			if got := f.Job(42); got.Version != before.Version {
				t.Fatalf("job changed: %s v%d → %s v%d", before.Status, before.Version, got.Status, got.Version)
			}
			if msgs := f.messages(domain.QueueLaunch); len(msgs) != 0 {
				t.Fatalf("sent %d messages for a job that moved on", len(msgs))
			}
		})
	}
}

// A repeated requeue (the caller retrying after a failed send) sends the
// job again under the same dedup id: the queue keeps one message.
func TestRequeueRepeatedKeepsOneMessage(t *testing.T) {
	f := newFixture(t)
	f.createJob(assigned())
	for range 2 {
		if err := jobs.Requeue(f.Ctx, f.Store, f.Queue, 42, "bp-1", "instance failed"); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.Job(42); got.Attempts != 2 {
		t.Fatalf("attempts %d, want 2: the repeat must not count again", got.Attempts)
	}
	wantRequeueMessage(t, f, domain.QueueLaunch)
}

// racingStore is the real store with another writer that touches a row
// right after each of its first reads, so the guarded write that follows
// the read loses: the first jobRaces reads of a job that has not ended, and
// the first instanceRaces reads of an instance. final makes that writer
// complete the job instead.
type racingStore struct {
	*sqlite.Store
	jobRaces, instanceRaces int
	final                   bool
	mu                      sync.Mutex
}

// race reports whether a read that found its row is raced, and the races
// left after it, counting it.
func (s *racingStore) race(found bool, left *int) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !found || *left == 0 {
		return 0, false
	}
	*left--
	return *left, true
}

func (s *racingStore) GetJob(ctx context.Context, id int64) (domain.Job, error) {
	j, err := s.Store.GetJob(ctx, id)
	if n, ok := s.race(err == nil && !j.Status.Final(), &s.jobRaces); ok {
		_, err = s.Store.TransitionJob(ctx, id, domain.JobGuardOf(j), func(x *domain.Job) {
			x.Reason = fmt.Sprintf("touched %d", n)
			if s.final {
				x.Status, x.Conclusion = domain.JobCompleted, "cancelled"
			}
		})
	}
	return j, err
}

func (s *racingStore) GetInstance(ctx context.Context, id string) (domain.Instance, error) {
	in, err := s.Store.GetInstance(ctx, id)
	if n, ok := s.race(err == nil, &s.instanceRaces); ok {
		_, err = s.Store.Transition(ctx, id, domain.GuardOf(in), func(x *domain.Instance) { x.Reason = fmt.Sprintf("touched %d", n) })
	}
	return in, err
}

func TestStatusChangesRetryLostRaces(t *testing.T) {
	t.Run("mark running", func(t *testing.T) {
		f := newFixture(t)
		f.createJob(assigned())
		if err := jobs.MarkRunning(f.Ctx, &racingStore{Store: f.Store, jobRaces: 3}, 42, t0, ""); err != nil {
			t.Fatal(err)
		}
		if j := f.Job(42); j.Status != domain.JobRunning || j.Reason != "touched 0" {
			t.Fatalf("got %s (%q), want running on top of the other writer's change", j.Status, j.Reason)
		}
	})
	t.Run("requeue", func(t *testing.T) {
		f := newFixture(t)
		f.createJob(assigned())
		if err := jobs.Requeue(f.Ctx, &racingStore{Store: f.Store, jobRaces: 3}, f.Queue, 42, "bp-1", "failed"); err != nil {
			t.Fatal(err)
		}
		if j := f.Job(42); j.Status != domain.JobQueued || j.Attempts != 2 {
			t.Fatalf("got %s attempt %d, want queued attempt 2", j.Status, j.Attempts)
		}
	})
	t.Run("gives up after bounded attempts", func(t *testing.T) {
		f := newFixture(t)
		f.createJob(assigned())
		if err := jobs.MarkRunning(f.Ctx, &racingStore{Store: f.Store, jobRaces: 100}, 42, t0, ""); err == nil {
			t.Fatal("a job that never stops changing was marked running")
		}
		if j := f.Job(42); j.Status != domain.JobAssigned {
			t.Fatalf("got %s, want still assigned", j.Status)
		}
	})
}

func TestRetryDelayDoublesWithEachFailedAttemptUpToItsBound(t *testing.T) {
	for attempts, want := range map[int]time.Duration{
		0: jobs.RequeueDelay, 1: jobs.RequeueDelay, 2: 2 * jobs.RequeueDelay, 3: 4 * jobs.RequeueDelay,
		8: 128 * jobs.RequeueDelay, 9: jobs.MaxRequeueDelay, 1000: jobs.MaxRequeueDelay,
	} {
		if got := jobs.RetryDelay(attempts); got != want {
			t.Errorf("RetryDelay(%d) = %s, want %s", attempts, got, want)
		}
	}
}

func TestAJobWhoseInstancesKeepFailingWaitsLongerEachTime(t *testing.T) {
	f := newFixture(t)
	j := assigned()
	j.Attempts = 0
	f.createJob(j)
	var waited []time.Duration
	for attempt := 1; attempt <= 4; attempt++ {
		if err := jobs.Requeue(f.Ctx, f.Store, f.Queue, 42, "bp-1", "instance failed: exit 127"); err != nil {
			t.Fatal(err)
		}
		start := f.Clock.Now()
		for {
			msgs, err := f.Queue.Receive(f.Ctx, domain.QueueLaunch, 10, time.Minute, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) > 0 {
				if err := f.Queue.Delete(f.Ctx, domain.QueueLaunch, []string{msgs[0].Receipt}); err != nil {
					t.Fatal(err)
				}
				break
			}
			f.Clock.Advance(time.Second)
		}
		waited = append(waited, f.Clock.Now().Sub(start))
		// A new instance takes it, and fails as well.
		var verbs domain.Lifecycle
		bind := verbs.AssignJob(f.Job(42), "bp-1", domain.ViaReuse,
			domain.RunnerRegistration{RunnerID: 7, Name: "bp-1-42"}, f.Clock.Now())
		if _, err := f.Store.TransitionJob(f.Ctx, 42, bind.Guard, bind.Apply); err != nil {
			t.Fatal(err)
		}
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}
	if fmt.Sprint(waited) != fmt.Sprint(want) {
		t.Fatalf("the job waited %v in its queue after each failure, want %v", waited, want)
	}
}
