package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// An instance taken out of service with a job it had not started sends the
// job back to its queue in the same change: never left assigned to an
// instance that will not run it.
func TestRetireRequeuesTheUnstartedJobInTheSameChange(t *testing.T) {
	f := newFixture(t)
	in := f.createInstance("bp-1", domain.StateClaimed, 42)
	f.createJob(assigned())
	deadline := t0.Add(10 * time.Minute)
	_, retired, err := jobs.Retire(f.Ctx, f.Store, f.Queue, in, domain.StateTerminating, "deadline passed", deadline)
	if err != nil || !retired {
		t.Fatalf("retire: %t, %v", retired, err)
	}
	got := f.Instance("bp-1")
	if got.State != domain.StateTerminating || got.Job != "" || got.Reason != "deadline passed" || !got.Deadline.Equal(deadline) {
		t.Fatalf("instance %s bound to %q (%q, until %s), want terminating, unbound", got.State, got.Job, got.Reason, got.Deadline)
	}
	j := f.Job(42)
	if j.Status != domain.JobQueued || j.InstanceID != "" || j.Attempts != 2 || j.SendPending {
		t.Fatalf("job %s on %q attempt %d pending %t, want queued, unbound, attempt 2, sent", j.Status, j.InstanceID, j.Attempts, j.SendPending)
	}
	wantRequeueMessage(t, f, jobs.QueueFor(j.Route))
}

func TestRetireLeavesAStartedJobAlone(t *testing.T) {
	f := newFixture(t)
	in := f.createInstance("bp-1", domain.StateRunning, 42)
	if _, err := f.Store.Transition(f.Ctx, in.ID, domain.GuardOf(in), func(i *domain.Instance) { i.JobStarted = true }); err != nil {
		t.Fatal(err)
	}
	f.createJob(assigned())
	_, retired, err := jobs.Retire(f.Ctx, f.Store, f.Queue, f.Instance("bp-1"), domain.StateError, "boom", t0)
	if err != nil || !retired {
		t.Fatalf("retire: %t, %v", retired, err)
	}
	if got := f.Instance("bp-1"); got.Job != "42" || got.State != domain.StateError {
		t.Fatalf("instance %s bound to %q, want error, still bound to its started job", got.State, got.Job)
	}
	if j := f.Job(42); j.Status != domain.JobAssigned || j.InstanceID != "bp-1" {
		t.Fatalf("job %s on %q: a started job must not be requeued", j.Status, j.InstanceID)
	}
}

func TestRetireOfAnInstanceThatMovedOnChangesNothing(t *testing.T) {
	f := newFixture(t)
	stale := f.createInstance("bp-1", domain.StateClaimed, 42)
	f.createJob(assigned())
	if _, err := f.Store.Transition(f.Ctx, stale.ID, domain.GuardOf(stale), func(i *domain.Instance) { i.State = domain.StateRunning }); err != nil {
		t.Fatal(err)
	}
	_, retired, err := jobs.Retire(f.Ctx, f.Store, f.Queue, stale, domain.StateTerminating, "late", t0)
	if err != nil || retired {
		t.Fatalf("retire of a stale read: %t, %v; want false and no error", retired, err)
	}
	if j := f.Job(42); j.Status != domain.JobAssigned || j.InstanceID != "bp-1" {
		t.Fatalf("job %s on %q: changed by a refused retire", j.Status, j.InstanceID)
	}
}

// failingQueue refuses every send, as a queue that is down would.
type failingQueue struct{ domain.Queue }

func (failingQueue) Send(context.Context, string, []domain.SendRequest) error {
	return errors.New("queue down")
}

// A requeue whose message could not be sent (or a crash between the change
// and the send) keeps SendPending; the sweep sends the message later.
func TestSendPendingSendsWhatACrashLeftUnsent(t *testing.T) {
	f := newFixture(t)
	in := f.createInstance("bp-1", domain.StateClaimed, 42)
	f.createJob(assigned())
	_, retired, err := jobs.Retire(f.Ctx, f.Store, failingQueue{f.Queue}, in, domain.StateTerminating, "deadline passed", t0)
	if !retired || err == nil {
		t.Fatalf("retire with the queue down: %t, %v; want retired with the send's error", retired, err)
	}
	if j := f.Job(42); j.Status != domain.JobQueued || !j.SendPending {
		t.Fatalf("job %s pending %t, want queued with its message still to send", j.Status, j.SendPending)
	}
	if n, err := jobs.SendPending(f.Ctx, f.Store, f.Queue, f.Clock.Now(), time.Minute); err != nil || n != 0 {
		t.Fatalf("sweep before the grace: %d sent, %v; want none (the sender may still be at it)", n, err)
	}
	f.Clock.Advance(time.Minute)
	if n, err := jobs.SendPending(f.Ctx, f.Store, f.Queue, f.Clock.Now(), time.Minute); err != nil || n != 1 {
		t.Fatalf("sweep: %d sent, %v; want 1", n, err)
	}
	if j := f.Job(42); j.SendPending {
		t.Fatal("job still marked pending after the sweep sent it")
	}
	wantRequeueMessage(t, f, jobs.QueueFor(domain.RouteLaunch))
	if n, err := jobs.SendPending(f.Ctx, f.Store, f.Queue, f.Clock.Now(), time.Minute); err != nil || n != 0 {
		t.Fatalf("second sweep: %d sent, %v; want none", n, err)
	}
}

// An interruption leaves a job that has ended alone: it completed before
// the machine was taken back, so there is nothing to re-run.
func TestInterruptLeavesACompletedJobAlone(t *testing.T) {
	f := newFixture(t)
	in := f.createInstance("bp-1", domain.StateRunning, 42)
	j := assigned()
	j.Status = domain.JobCompleted
	f.createJob(j)
	done, ok, err := jobs.Interrupt(f.Ctx, f.Store, f.Queue, in, "spot", t0.Add(2*time.Minute), t0.Add(time.Minute))
	if err != nil || !ok {
		t.Fatalf("interrupt: %t, %v", ok, err)
	}
	if done.Job != nil || done.Instance.State != domain.StateTerminating {
		t.Fatalf("interruption %+v, want the instance terminating and no job", done)
	}
	if got := f.Job(42); got.Interrupted || got.Status != domain.JobCompleted {
		t.Fatalf("completed job became %s, interrupted %t", got.Status, got.Interrupted)
	}
}

// An instance whose job started (as GitHub reports it, or its agent) is
// taken out of service by an interruption but runs on until the notice's
// time, bound to the job, which is marked interrupted: the job may finish
// before the cloud takes the machine. One whose job had not started ends
// now, and its job goes back to its queue.
func TestInterruptLeavesAStartedJobRunningUntilTheNotice(t *testing.T) {
	notice, deadline := t0.Add(2*time.Minute), t0.Add(10*time.Minute)
	for _, st := range []domain.State{domain.StateClaimed, domain.StateRunning} {
		t.Run(string(st), func(t *testing.T) {
			f := newFixture(t)
			in := f.createInstance("bp-1", st, 42)
			j := assigned()
			j.Status = domain.JobRunning
			f.createJob(j)
			done, ok, err := jobs.Interrupt(f.Ctx, f.Store, f.Queue, in, "spot", notice, deadline)
			if err != nil || !ok {
				t.Fatalf("interrupt: %t, %v", ok, err)
			}
			got := f.Instance("bp-1")
			if got.State != domain.StateRunning || !got.Leaving() || got.Job != "42" || !got.JobStarted || !got.Deadline.Equal(notice) {
				t.Fatalf("instance %s bound to %q (started %t, %q) until %s, want running its job until the notice, out of service",
					got.State, got.Job, got.JobStarted, got.Reason, got.Deadline)
			}
			if done.Job == nil || !done.Job.Interrupted || f.Job(42).Status != domain.JobRunning {
				t.Fatalf("job %+v, want it running, marked interrupted", f.Job(42))
			}
		})
	}
	t.Run("not started", func(t *testing.T) {
		f := newFixture(t)
		in := f.createInstance("bp-1", domain.StateClaimed, 42)
		f.createJob(assigned())
		if _, ok, err := jobs.Interrupt(f.Ctx, f.Store, f.Queue, in, "spot", notice, deadline); err != nil || !ok {
			t.Fatalf("interrupt: %t, %v", ok, err)
		}
		if got := f.Instance("bp-1"); got.State != domain.StateTerminating || got.Job != "" || !got.Deadline.Equal(deadline) {
			t.Fatalf("instance %s bound to %q until %s, want terminating, unbound, until %s", got.State, got.Job, got.Deadline, deadline)
		}
		if j := f.Job(42); j.Status != domain.JobQueued || j.Interrupted {
			t.Fatalf("job %s (interrupted %t), want back in its queue, not marked", j.Status, j.Interrupted)
		}
	})
}
