package jobs_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// rebind follows GitHub's report that the runner on instance taker ran job
// id, as the intake does: by the runner's name, the one the instance
// holds (or one naming it, when it holds none).
func rebind(f *fixture, st jobs.Store, id int64, taker string) error {
	f.T.Helper()
	name := domain.RunnerName(taker, id)
	if in, err := f.Store.GetInstance(f.Ctx, taker); err == nil && in.RunnerName != "" {
		name = in.RunnerName
	}
	_, err := jobs.FollowRunner(f.Ctx, st, f.Queue, id, name, t0)
	return err
}

func TestServesJob(t *testing.T) {
	serving := []domain.State{domain.StateBooting, domain.StateClaimed, domain.StateRunning}
	for _, st := range domain.States {
		if got, want := jobs.ServesJob(st), slices.Contains(serving, st); got != want {
			t.Errorf("ServesJob(%s) = %v, want %v", st, got, want)
		}
	}
	if jobs.ServesJob(domain.State("idle")) {
		t.Error("an unknown state serves a job")
	}
}

// swapPair writes bp-1 running job 42 and bp-2 claimed for job 43, each
// job assigned to its instance: two jobs with the same labels, whose
// runners GitHub may swap.
func swapPair(f *fixture) {
	f.T.Helper()
	f.createInstance("bp-1", domain.StateRunning, 42)
	f.createInstance("bp-2", domain.StateClaimed, 43)
	for _, j := range []domain.Job{
		{ID: 42, Status: domain.JobAssigned, InstanceID: "bp-1", RunnerName: "bp-1-42", Attempts: 1},
		{ID: 43, Status: domain.JobAssigned, InstanceID: "bp-2", RunnerName: "bp-2-43", Attempts: 1},
	} {
		f.createJob(j)
	}
}

// wantBound fails unless instance id is bound to job (not started) and the
// job to the instance, and the instance still holds its own registration.
func wantBound(t *testing.T, f *fixture, id string, job int64) {
	t.Helper()
	in, j := f.Instance(id), f.Job(job)
	if in.Job != domain.JobKey(job) || in.JobStarted || j.InstanceID != id {
		t.Fatalf("%s bound to %q (started %v), job %d to %q; want each other", id, in.Job, in.JobStarted, job, j.InstanceID)
	}
	if in.RunnerConfig != "jit-of-"+id {
		t.Fatalf("%s holds runner %q with another config, want its own", id, in.RunnerName)
	}
}

func TestRebindFollowsTheRunnerThatTookTheJob(t *testing.T) {
	f := newFixture(t)
	swapPair(f)
	// bp-1's runner took job 43.
	if err := rebind(f, f.Store, 43, "bp-1"); err != nil {
		t.Fatal(err)
	}
	wantBound(t, f, "bp-1", 43)
	if in := f.Instance("bp-1"); in.State != domain.StateRunning || in.RunnerName != "bp-1-42" {
		t.Fatalf("bp-1 %s runner %q, want still running its own runner bp-1-42", in.State, in.RunnerName)
	}
	if j := f.Job(43); j.Status != domain.JobAssigned || j.RunnerName != "bp-2-43" || j.Attempts != 1 {
		t.Fatalf("job 43 %s runner %q attempt %d: only its instance should change", j.Status, j.RunnerName, j.Attempts)
	}
	// Job 42 is handed to the runner that is left, bp-2's, whose labels
	// cover it; bp-2 keeps its own registration.
	wantBound(t, f, "bp-2", 42)
	if j := f.Job(42); j.Status != domain.JobAssigned || j.RunnerName != "bp-1-42" || j.Attempts != 1 {
		t.Fatalf("job 42 %s runner %q attempt %d: only its instance should change", j.Status, j.RunnerName, j.Attempts)
	}

	// bp-2's runner took job 42, as expected: nothing more to do.
	before := f.Instance("bp-2")
	if err := rebind(f, f.Store, 42, "bp-2"); err != nil {
		t.Fatal(err)
	}
	wantBound(t, f, "bp-2", 42)
	wantBound(t, f, "bp-1", 43)
	if after := f.Instance("bp-2"); after.Version != before.Version {
		t.Fatalf("bp-2 written again: v%d → v%d", before.Version, after.Version)
	}
	f.wantQueued(0)
}

// A displaced job whose labels the left runner does not carry can only be
// served by a new runner: it is requeued and, in the same change, the left
// instance is unbound; its runner may wait a while for a job it can take.
func TestRebindRequeuesADisplacedJobNoLeftRunnerCanTake(t *testing.T) {
	f := newFixture(t)
	f.createInstance("bp-1", domain.StateRunning, 42)
	f.createInstance("bp-2", domain.StateClaimed, 43)
	f.createJob(domain.Job{ID: 42, Status: domain.JobAssigned, InstanceID: "bp-1", RunnerName: "bp-1-42", Attempts: 1,
		Labels: []string{"self-hosted", "Linux", "gpu"}})
	f.createJob(domain.Job{ID: 43, Status: domain.JobAssigned, InstanceID: "bp-2", RunnerName: "bp-2-43", Attempts: 1,
		Labels: []string{"self-hosted", "linux"}})
	if err := rebind(f, f.Store, 43, "bp-1"); err != nil {
		t.Fatal(err)
	}
	wantBound(t, f, "bp-1", 43)
	if j := f.Job(42); j.Status != domain.JobQueued || j.InstanceID != "" || j.RunnerName != "" || j.Attempts != 2 {
		t.Fatalf("job 42 %s on %q runner %q attempt %d, want queued again, unbound", j.Status, j.InstanceID, j.RunnerName, j.Attempts)
	}
	f.wantQueued(1)
	if in := f.Instance("bp-2"); in.Job != "" || in.State != domain.StateClaimed || in.Deadline.After(t0.Add(jobs.UnboundWait)) {
		t.Fatalf("bp-2 %s bound to %q until %s, want unbound, waiting at most %s", in.State, in.Job, in.Deadline, jobs.UnboundWait)
	}
}

// The left instance may have moved on before the report arrives (its
// runner started another job, or it failed): the displaced job is requeued.
func TestRebindRequeuesADisplacedJobWhenTheLeftInstanceMovedOn(t *testing.T) {
	for name, move := range map[string]func(*domain.Instance){
		"failed":  func(i *domain.Instance) { i.State = domain.StateError },
		"rebound": func(i *domain.Instance) { i.Job = "44" },
		"gone":    func(i *domain.Instance) { i.State = domain.StateTerminating },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			swapPair(f)
			in := f.Instance("bp-2")
			if _, err := f.Store.Transition(f.Ctx, in.ID, domain.GuardOf(in), move); err != nil {
				t.Fatal(err)
			}
			if err := rebind(f, f.Store, 43, "bp-1"); err != nil {
				t.Fatal(err)
			}
			if j := f.Job(42); j.Status != domain.JobQueued || j.InstanceID != "" {
				t.Fatalf("job 42 %s on %q, want queued again", j.Status, j.InstanceID)
			}
			f.wantQueued(1)
		})
	}
}

// The left instance's runner started a job, which cannot be the one GitHub
// says another runner took: most likely the displaced one, which it is
// handed; it keeps its started mark, so no loop touches it.
func TestRebindHandsTheDisplacedJobToAStartedRunnerThatCanTakeIt(t *testing.T) {
	f := newFixture(t)
	swapPair(f)
	in := f.Instance("bp-2")
	if _, err := f.Store.Transition(f.Ctx, in.ID, domain.GuardOf(in), func(i *domain.Instance) {
		i.JobStarted, i.State = true, domain.StateRunning
	}); err != nil {
		t.Fatal(err)
	}
	if err := rebind(f, f.Store, 43, "bp-1"); err != nil {
		t.Fatal(err)
	}
	if in, j := f.Instance("bp-2"), f.Job(42); in.Job != "42" || !in.JobStarted || j.InstanceID != "bp-2" {
		t.Fatalf("bp-2 bound to %q (started %t), job 42 to %q; want each other, still started", in.Job, in.JobStarted, j.InstanceID)
	}
	f.wantQueued(0)
}

func TestRebindAlreadyBoundChangesNothing(t *testing.T) {
	cases := []struct {
		name  string
		setup func(f *fixture)
	}{
		{"job started on the instance it was assigned", func(*fixture) {}},
		{"repeated report of a swap", func(f *fixture) {
			if err := rebind(f, f.Store, 43, "bp-1"); err != nil {
				f.T.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			swapPair(f)
			tc.setup(f)
			id := f.Job(43).InstanceID
			in, j := f.Instance(id), f.Job(43)
			if err := rebind(f, f.Store, 43, id); err != nil {
				t.Fatal(err)
			}
			if after, jafter := f.Instance(id), f.Job(43); after.Version != in.Version || jafter.Version != j.Version {
				t.Fatalf("wrote %s v%d → v%d, job 43 v%d → v%d", id, in.Version, after.Version, j.Version, jafter.Version)
			}
		})
	}
}

// Rebind is told what GitHub saw, possibly late: a job that is over, an
// instance no longer serving (failed, released, gone), a job or instance
// bullpen does not know, is left as it is.
func TestRebindLeavesAlone(t *testing.T) {
	cases := []struct {
		name  string
		job   *domain.Job  // job 43, when written
		inst  domain.State // bp-1's state, "" for no instance
		bound int64        // bp-1's job
	}{
		{"completed job", &domain.Job{Status: domain.JobCompleted, InstanceID: "bp-2", Conclusion: "cancelled"}, domain.StateRunning, 42},
		{"rejected job", &domain.Job{Status: domain.JobRejected, Reason: "no pool"}, domain.StateRunning, 42},
		{"unknown job", nil, domain.StateRunning, 42},
		{"unknown instance", &domain.Job{Status: domain.JobAssigned, InstanceID: "bp-2"}, "", 0},
		{"failed instance", &domain.Job{Status: domain.JobAssigned, InstanceID: "bp-2"}, domain.StateError, 42},
		{"releasing instance", &domain.Job{Status: domain.JobAssigned, InstanceID: "bp-2"}, domain.StateReleasing, 0},
		{"idle instance", &domain.Job{Status: domain.JobAssigned, InstanceID: "bp-2"}, domain.StateReady, 0},
		{"stopped instance", &domain.Job{Status: domain.JobAssigned, InstanceID: "bp-2"}, domain.StateStopped, 0},
		{"terminating instance", &domain.Job{Status: domain.JobAssigned, InstanceID: "bp-2"}, domain.StateTerminating, 42},
		{"terminated instance", &domain.Job{Status: domain.JobAssigned, InstanceID: "bp-2"}, domain.StateTerminated, 42},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			var before domain.Instance
			if tc.inst != "" {
				before = f.createInstance("bp-1", tc.inst, tc.bound)
			}
			var jbefore domain.Job
			if tc.job != nil {
				tc.job.ID = 43
				jbefore = f.createJob(*tc.job)
			}
			if err := rebind(f, f.Store, 43, "bp-1"); err != nil {
				t.Fatal(err)
			}
			if tc.inst != "" {
				if after := f.Instance("bp-1"); after.Version != before.Version || after.Job != before.Job {
					t.Fatalf("instance changed: %s %q v%d → %q v%d", tc.inst, before.Job, before.Version, after.Job, after.Version)
				}
			}
			if tc.job != nil {
				if after := f.Job(43); after.Version != jbefore.Version || after.InstanceID != jbefore.InstanceID {
					t.Fatalf("job changed: on %q v%d → on %q v%d", jbefore.InstanceID, jbefore.Version, after.InstanceID, after.Version)
				}
			}
		})
	}
}

func TestRebindRetriesLostRaces(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		jobRaces, instanceRaces int
		reason                  func(*fixture) string // of the row raced
	}{
		{"on the instance", 0, 3, func(f *fixture) string { return f.Instance("bp-1").Reason }},
		{"on the job", 3, 0, func(f *fixture) string { return f.Job(43).Reason }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			swapPair(f)
			racer := &racingStore{Store: f.Store, jobRaces: tc.jobRaces, instanceRaces: tc.instanceRaces}
			if err := rebind(f, racer, 43, "bp-1"); err != nil {
				t.Fatal(err)
			}
			wantBound(t, f, "bp-1", 43)
			if reason := tc.reason(f); reason != "touched 0" {
				t.Fatalf("reason %q: the other writer's change was lost", reason)
			}
		})
	}
	t.Run("the other writer completes the job", func(t *testing.T) {
		f := newFixture(t)
		swapPair(f)
		// The job is read once by Rebind itself: completed on its next read.
		racer := &racingStore{Store: f.Store, jobRaces: 1, final: true}
		if err := rebind(f, racer, 43, "bp-1"); err != nil {
			t.Fatal(err)
		}
		if j := f.Job(43); j.Status != domain.JobCompleted || j.InstanceID != "bp-2" {
			t.Fatalf("job 43 %s on %q, want the completion kept, on bp-2", j.Status, j.InstanceID)
		}
	})
	t.Run("gives up on an instance that never stops changing", func(t *testing.T) {
		f := newFixture(t)
		swapPair(f)
		if err := rebind(f, &racingStore{Store: f.Store, instanceRaces: 100}, 43, "bp-1"); err == nil {
			t.Fatal("no error, though bp-1 was never bound to job 43")
		}
		if in, j := f.Instance("bp-1"), f.Job(43); in.Job != "42" || j.InstanceID != "bp-2" {
			t.Fatalf("bp-1 bound to %q, job 43 to %q: half a rebind, want neither changed", in.Job, j.InstanceID)
		}
	})
}

// wantQueued fails unless job 42's queue holds n messages, each job 42.
func (f *fixture) wantQueued(n int) {
	f.T.Helper()
	msgs := f.messages(jobs.QueueFor(f.Job(42).Route))
	if len(msgs) != n {
		f.T.Fatalf("%d messages queued, want %d", len(msgs), n)
	}
	for _, m := range msgs {
		if id, err := jobs.Decode(m.Body); err != nil || id != 42 {
			f.T.Fatalf("queued %q, want job 42", m.Body)
		}
	}
}

// takenJobs are what job 43, taken by bp-1's runner in place of job 42,
// can be that bp-1 cannot be bound to: a job over, or one bullpen does not
// know (nil, never recorded).
var takenJobs = map[string]*domain.Job{
	"over":    {ID: 43, Status: domain.JobCompleted, Conclusion: "success"},
	"unknown": nil,
}

// runnerTook records bp-1 running job 42, the job's first attempt, queued
// on GitHub a minute before t0, and job43, the job bp-1's runner took
// instead, unless it is nil. It returns bp-1.
func (f *fixture) runnerTook(job43 *domain.Job) domain.Instance {
	f.T.Helper()
	in := f.createInstance("bp-1", domain.StateRunning, 42)
	f.createJob(domain.Job{ID: 42, Status: domain.JobAssigned, InstanceID: "bp-1", RunnerName: "bp-1-42", Attempts: 1,
		QueuedAt: t0.Add(-time.Minute)})
	if job43 != nil {
		f.createJob(*job43)
	}
	return in
}

// agentSawStart writes what in's agent reporting its runner started a job
// writes: in marked started, and job 42 running.
func (f *fixture) agentSawStart(in domain.Instance) {
	f.T.Helper()
	if _, err := f.Store.Transition(f.Ctx, in.ID, domain.GuardOf(in), func(i *domain.Instance) { i.JobStarted = true }); err != nil {
		f.T.Fatal(err)
	}
	if err := jobs.MarkRunning(f.Ctx, f.Store, 42, t0, ""); err != nil {
		f.T.Fatal(err)
	}
}

// bp-1's runner took job 43, which bp-1 cannot be bound to: one that is
// over (GitHub's first word of it, its queued and in_progress deliveries
// lost or late), or one bullpen does not know (another stack's, whose
// labels bp-1's runner carries). The runner will never run job 42, which
// goes back to its queue; bp-1 is unbound, serving no job of bullpen's.
func TestFollowRunnerRequeuesTheJobOfARunnerThatTookAJobItCannotBeBoundTo(t *testing.T) {
	for name, job43 := range takenJobs {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.runnerTook(job43)
			moved, err := jobs.FollowRunner(f.Ctx, f.Store, f.Queue, 43, "bp-1-42", t0)
			if err != nil || !moved {
				t.Fatalf("moved %v, %v; want the report followed", moved, err)
			}
			if j := f.Job(42); j.Status != domain.JobQueued || j.InstanceID != "" || j.Attempts != 2 || j.Reason != "its runner took job 43" {
				t.Fatalf("job 42 %s on %q attempt %d (%q), want queued again, unbound", j.Status, j.InstanceID, j.Attempts, j.Reason)
			}
			f.wantQueued(1)
			// A job that is over leaves the runner idle; one bullpen does
			// not know runs on it, and is not cut short.
			wait := jobs.UnboundWait
			if job43 == nil {
				wait = jobs.ForeignJobWait
			}
			if in := f.Instance("bp-1"); in.Job != "" || in.State != domain.StateRunning || !in.Deadline.Equal(t0.Add(wait)) {
				t.Fatalf("bp-1 %s bound to %q until %s, want unbound, waiting %s", in.State, in.Job, in.Deadline, wait)
			}
			if job43 != nil {
				if j := f.Job(43); j.Status != domain.JobCompleted || j.InstanceID != "" {
					t.Fatalf("job 43 %s on %q, want left completed", j.Status, j.InstanceID)
				}
			}
		})
	}
}

// What FollowRunner and FollowRunnerEnded leave alone, beyond what Rebind
// does: a report about a runner the instance no longer holds (a late
// delivery about its last job), a name bullpen did not give, a job that
// ended on an instance, and a job GitHub itself reported started on the
// runner, which a report that the runner took another job contradicts.
func TestFollowRunnerLeavesAlone(t *testing.T) {
	cases := []struct {
		name   string
		runner string
		job    *domain.Job // job 43, when written
		status domain.JobStatus
		// ranOn is the runner job 42 is recorded on, when not the one
		// registered for it: GitHub reported it there.
		ranOn string
	}{
		{"another runner of the instance, job over", "bp-1-40", &domain.Job{Status: domain.JobCompleted}, domain.JobAssigned, ""},
		{"another runner of the instance, job unknown", "bp-1-40", nil, domain.JobAssigned, ""},
		{"another runner of the instance, job assigned", "bp-1-40", &domain.Job{Status: domain.JobAssigned, InstanceID: "bp-2"}, domain.JobAssigned, ""},
		{"not bullpen's runner", "GitHub Actions 5", nil, domain.JobAssigned, ""},
		{"job over on this instance", "bp-1-42", &domain.Job{Status: domain.JobCompleted, InstanceID: "bp-1"}, domain.JobAssigned, ""},
		{"job over on another instance", "bp-1-42", &domain.Job{Status: domain.JobCompleted, InstanceID: "bp-2"}, domain.JobAssigned, ""},
		{"job unknown, own job started as GitHub reported", "bp-1-41", nil, domain.JobRunning, "bp-1-41"},
		{"job over, own job started as GitHub reported", "bp-1-41", &domain.Job{Status: domain.JobCompleted}, domain.JobRunning, "bp-1-41"},
	}
	follows := map[string]func(context.Context, jobs.Store, domain.Queue, int64, string, time.Time) (bool, error){
		"started": jobs.FollowRunner, "ended": jobs.FollowRunnerEnded,
	}
	for _, tc := range cases {
		for report, follow := range follows {
			t.Run(tc.name+", "+report, func(t *testing.T) {
				f := newFixture(t)
				runner := "bp-1-42"
				if tc.ranOn != "" {
					runner = tc.ranOn // bp-1's runner, registered for job 41, was handed job 42
				}
				before := f.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateRunning, Job: "42",
					RunnerName: runner, RunnerConfig: "jit-of-bp-1"})
				jbefore := f.createJob(domain.Job{ID: 42, Status: tc.status, InstanceID: "bp-1", RunnerName: runner, Attempts: 1})
				if tc.job != nil {
					j := *tc.job // each subtest its own copy: they run in parallel
					j.ID = 43
					f.createJob(j)
				}
				moved, err := follow(f.Ctx, f.Store, f.Queue, 43, tc.runner, t0)
				if err != nil || moved {
					t.Fatalf("moved %v, %v; want nothing done", moved, err)
				}
				if after := f.Instance("bp-1"); after.Version != before.Version {
					t.Fatalf("bp-1 changed: %q v%d → %q v%d", before.Job, before.Version, after.Job, after.Version)
				}
				if after := f.Job(42); after.Version != jbefore.Version {
					t.Fatalf("job 42 changed: %s v%d → %s v%d", jbefore.Status, jbefore.Version, after.Status, after.Version)
				}
				f.wantQueued(0)
			})
		}
	}
}

// The usual order of a take: bp-1's agent reports its runner started a
// job, which marks job 42 running, before GitHub's report that the runner
// took job 43 (another stack's, or one that is over). The agent cannot
// tell which job its runner started; GitHub can: job 42 never ran on bp-1,
// and goes back to its queue, its start forgotten.
func TestFollowRunnerRequeuesAJobOnlyItsAgentSawStart(t *testing.T) {
	for name, job43 := range takenJobs {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.agentSawStart(f.runnerTook(job43))
			moved, err := jobs.FollowRunner(f.Ctx, f.Store, f.Queue, 43, "bp-1-42", t0.Add(time.Second))
			if err != nil || !moved {
				t.Fatalf("moved %v, %v; want the report followed", moved, err)
			}
			j := f.Job(42)
			if j.Status != domain.JobQueued || j.InstanceID != "" || j.RunnerName != "" || j.Attempts != 2 ||
				j.Reason != "its runner took job 43" || !j.StartedAt.IsZero() {
				t.Fatalf("job 42 %s on %q runner %q attempt %d (%q) started %s, want queued again, unbound, not started",
					j.Status, j.InstanceID, j.RunnerName, j.Attempts, j.Reason, j.StartedAt)
			}
			if since, ok := j.WaitingSince(); !ok || !since.Equal(t0.Add(-time.Minute)) {
				t.Fatalf("job 42 waiting %v since %s, want waiting since GitHub queued it", ok, since)
			}
			f.wantQueued(1)
			if in := f.Instance("bp-1"); in.Job != "" || in.State != domain.StateRunning {
				t.Fatalf("bp-1 %s bound to %q, want running, unbound", in.State, in.Job)
			}
		})
	}
}

// GitHub's report that job 43, which bp-1 cannot be bound to, ended on
// bp-1's runner: the runner served its one job and will take no other.
// bp-1 is retired, whether the start of job 43 was reported first (bp-1
// unbound already), never (its job goes back to its queue in the same
// change), or after bp-1's agent had reported a start; a report of the
// start coming late changes nothing more.
func TestFollowRunnerEndedRetiresASpentRunner(t *testing.T) {
	cases := []struct {
		name         string
		job43        *domain.Job
		agentStarted bool // bp-1's agent reported its runner started a job
		startedFirst bool // GitHub's start of job 43 was followed before its end
	}{
		{"unknown job, start reported first", nil, false, true},
		{"unknown job, agent's start then GitHub's", nil, true, true},
		{"unknown job, end reported alone", nil, false, false},
		{"unknown job, agent's start then the end alone", nil, true, false},
		{"job over, end reported alone", takenJobs["over"], false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			in := f.runnerTook(tc.job43)
			if tc.agentStarted {
				f.agentSawStart(in)
			}
			if tc.startedFirst {
				if _, err := jobs.FollowRunner(f.Ctx, f.Store, f.Queue, 43, "bp-1-42", t0); err != nil {
					t.Fatal(err)
				}
			}
			ended := t0.Add(2 * time.Minute)
			moved, err := jobs.FollowRunnerEnded(f.Ctx, f.Store, f.Queue, 43, "bp-1-42", ended)
			if err != nil || !moved {
				t.Fatalf("moved %v, %v; want the end followed", moved, err)
			}
			got := f.Instance("bp-1")
			if got.State != domain.StateTerminating || got.Job != "" || got.JobStarted || got.RunnerName != "" || got.RunnerConfig != "" ||
				!strings.Contains(got.Reason, "job 43") || got.Deadline.After(ended.Add(domain.DefaultDeadlines().Terminating)) {
				t.Fatalf("bp-1 %s bound to %q (started %v) runner %q until %s (%q), want terminating, its runner spent",
					got.State, got.Job, got.JobStarted, got.RunnerName, got.Deadline, got.Reason)
			}
			if j := f.Job(42); j.Status != domain.JobQueued || j.InstanceID != "" || j.Attempts != 2 || !j.StartedAt.IsZero() {
				t.Fatalf("job 42 %s on %q attempt %d started %s, want queued again once", j.Status, j.InstanceID, j.Attempts, j.StartedAt)
			}
			f.wantQueued(1)

			// GitHub's start of job 43, delivered late.
			if moved, err := jobs.FollowRunner(f.Ctx, f.Store, f.Queue, 43, "bp-1-42", ended.Add(time.Second)); err != nil || moved {
				t.Fatalf("late start: moved %v, %v; want nothing done", moved, err)
			}
			if after := f.Instance("bp-1"); after.Version != got.Version {
				t.Fatalf("bp-1 written again by a late start: v%d → v%d", got.Version, after.Version)
			}
		})
	}
}

// The end of a job bullpen binds is followed as its start is: the job is
// bound to the instance whose runner ran it, which its end releases.
func TestFollowRunnerEndedBindsAJobOfOurs(t *testing.T) {
	f := newFixture(t)
	swapPair(f)
	moved, err := jobs.FollowRunnerEnded(f.Ctx, f.Store, f.Queue, 43, "bp-1-42", t0)
	if err != nil || !moved {
		t.Fatalf("moved %v, %v; want the report followed", moved, err)
	}
	wantBound(t, f, "bp-1", 43)
	wantBound(t, f, "bp-2", 42)
	if in := f.Instance("bp-1"); in.State != domain.StateRunning {
		t.Fatalf("bp-1 %s, want running: the end of its job releases it", in.State)
	}
}

// A late report of the end of a job the instance's previous runner ran,
// reaching it while it holds no runner (a pool member warming up again, or
// claimed for a job whose runner is not named yet), does not retire it.
func TestFollowRunnerEndedLeavesAnInstanceHoldingNoRunner(t *testing.T) {
	for name, in := range map[string]domain.Instance{
		"warming up":       {ID: "bp-1", State: domain.StateBooting, Role: domain.RoleHot},
		"claimed, unnamed": {ID: "bp-1", State: domain.StateClaimed, Job: "44"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			before := f.CreateInstance(in)
			moved, err := jobs.FollowRunnerEnded(f.Ctx, f.Store, f.Queue, 43, "bp-1-42", t0)
			if err != nil || moved {
				t.Fatalf("moved %v, %v; want nothing done", moved, err)
			}
			if after := f.Instance("bp-1"); after.Version != before.Version {
				t.Fatalf("bp-1 changed: %s v%d → %s v%d", before.State, before.Version, after.State, after.Version)
			}
		})
	}
}
