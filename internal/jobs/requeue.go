package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// RequeueDelay is how long a job sent back to its queue for the first time
// waits before it is tried again; MaxRequeueDelay bounds RetryDelay.
const (
	RequeueDelay    = 2 * time.Second
	MaxRequeueDelay = 5 * time.Minute
)

// RetryDelay is how long a job waits in its queue after its attempts-th
// attempt failed: RequeueDelay, doubled for each attempt after the first, up
// to MaxRequeueDelay. A job whose machines all fail (a runner command or an
// image that cannot work) would otherwise take a new machine every few
// seconds for as long as GitHub keeps it queued; backing off, it takes
// about a dozen an hour after the first eight.
func RetryDelay(attempts int) time.Duration {
	return domain.Doubling(RequeueDelay, MaxRequeueDelay, attempts)
}

// Requeue sends a job that was assigned to instanceID back to its queue,
// unbound, because that instance cannot serve it. It does nothing if the
// job has moved on (started, finished, bound elsewhere, or no longer
// stored). A job it finds already queued with its message still to send is
// sent again, so that a caller retrying after a failed send does not strand
// it; the dedup id of the same attempt keeps the queue from holding it twice.
func Requeue(ctx context.Context, st Store, q domain.Queue, id int64, instanceID, reason string) error {
	j, err := update(ctx, st, id, func(j domain.Job) (domain.JobTransitionRequest, bool) {
		return verbs.RequeueJob(j, reason), j.Status == domain.JobAssigned && j.InstanceID == instanceID
	})
	if errors.Is(err, domain.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("requeue job %d: %w", id, err)
	}
	return sendRequeued(ctx, st, q, []domain.Job{j})
}

// sendRequeued sends the queue message of each job a change sent back to
// its queue, then clears the job's SendPending. A job whose message could
// not be sent keeps it: SendPending re-sends it.
func sendRequeued(ctx context.Context, st Store, q domain.Queue, changed []domain.Job) error {
	var errs []error
	for _, j := range changed {
		if j.Status != domain.JobQueued || j.InstanceID != "" || !j.SendPending {
			continue
		}
		if err := q.Send(ctx, QueueFor(j.Route), []domain.SendRequest{SendRequest(j, RetryDelay(j.Attempts))}); err != nil {
			errs = append(errs, fmt.Errorf("requeue job %d: %w", j.ID, err))
			continue
		}
		sent := verbs.MessageSent(j)
		_, err := st.TransitionJob(ctx, j.ID, sent.Guard, sent.Apply)
		if err != nil && !errors.Is(err, domain.ErrConflict) {
			// The message is out; a second one, should the reaper send
			// it, is dropped by its dedup id or by the consumer.
			errs = append(errs, fmt.Errorf("requeue job %d: clear pending send: %w", j.ID, err))
		}
	}
	return errors.Join(errs...)
}

// SendPending sends the queue message of every queued job whose message a
// crash (or a failed send) left unsent for at least after, and reports how
// many it sent.
func SendPending(ctx context.Context, st Store, q domain.Queue, now time.Time, after time.Duration) (int, error) {
	queued, err := st.ListJobs(ctx, domain.JobFilter{Statuses: []domain.JobStatus{domain.JobQueued}})
	if err != nil {
		return 0, fmt.Errorf("list queued jobs: %w", err)
	}
	var due []domain.Job
	for _, j := range queued {
		if j.SendPending && j.InstanceID == "" && now.Sub(j.UpdatedAt) >= after {
			due = append(due, j)
		}
	}
	return len(due), sendRequeued(ctx, st, q, due)
}

// Retire takes instance in out of service (to state to, with reason and
// deadline) and, in the same atomic change, sends the job it was serving
// back to its queue if that job had not started: no job is ever left bound
// to an instance that will not run it. ok is false when in changed since
// it was read (the caller decides again on what it is now); retired is the
// instance as written.
func Retire(ctx context.Context, st Store, q domain.Queue, in domain.Instance, to domain.State, reason string, deadline time.Time) (retired domain.Instance, ok bool, err error) {
	done, ok, err := takeOut(ctx, st, q, in, func(j *domain.Job) domain.Change {
		c := domain.Change{Instances: []domain.TransitionRequest{verbs.Retire(in, to, reason, deadline)}}
		if !in.JobStarted && j != nil && j.Status == domain.JobAssigned {
			c.Jobs = []domain.JobTransitionRequest{verbs.RequeueJob(*j, "its instance stopped serving it: "+reason)}
		}
		return c
	})
	if !ok {
		return domain.Instance{}, ok, err
	}
	return done.Instances[0], true, err
}

// Interruption is what Interrupt wrote.
type Interruption struct {
	Instance domain.Instance
	// Job is the job the instance was serving, as written: back in its
	// queue (it had not started) or marked interrupted (it had); nil when
	// the instance served none.
	Job *domain.Job
}

// Interrupt takes an instance whose machine the cloud is taking back at
// notice (a spot interruption) out of service at once. In the same change,
// a job it had not started goes back to its queue, and the instance is
// terminating, for reason, until deadline. One that had started (as its
// agent or GitHub reported) is marked interrupted: the cloud may cut it
// short, GitHub then fails it, and it may be re-run once its run completes.
// Its instance is not terminated before the cloud takes the machine: it
// leaves service but runs on until notice (domain.Lifecycle.Leave), so that
// the job may still finish. ok is false when in changed since it was read.
func Interrupt(ctx context.Context, st Store, q domain.Queue, in domain.Instance, reason string, notice, deadline time.Time) (Interruption, bool, error) {
	done, ok, err := takeOut(ctx, st, q, in, func(j *domain.Job) domain.Change {
		started := in.JobStarted || (j != nil && j.Status == domain.JobRunning)
		out := verbs.Interrupt(in, started, reason, deadline)
		if started && ServesJob(in.State) {
			out = verbs.Leave(in, reason, notice)
		}
		c := domain.Change{Instances: []domain.TransitionRequest{out}}
		switch {
		case j == nil:
		case started:
			c.Jobs = []domain.JobTransitionRequest{verbs.InterruptJob(*j)}
		default:
			c.Jobs = []domain.JobTransitionRequest{verbs.RequeueJob(*j, "its instance stopped serving it: "+reason)}
		}
		return c
	})
	if !ok {
		return Interruption{}, ok, err
	}
	out := Interruption{Instance: done.Instances[0]}
	if len(done.Jobs) > 0 {
		out.Job = &done.Jobs[0]
	}
	return out, true, err
}

// takeOut commits the change plan makes of in and the job it serves (nil
// when none), then sends a job the change sent back to its queue. A
// conflict on the job (it moved on meanwhile) is decided again; one on the
// instance is not: ok is false.
func takeOut(ctx context.Context, st Store, q domain.Queue, in domain.Instance, plan func(j *domain.Job) domain.Change) (domain.Changed, bool, error) {
	for range retries {
		j, err := servedJob(ctx, st, in)
		if err != nil {
			return domain.Changed{}, false, fmt.Errorf("retire %s: %w", in.ID, err)
		}
		done, err := st.Commit(ctx, plan(j))
		if errors.Is(err, domain.ErrConflict) {
			cur, gerr := st.GetInstance(ctx, in.ID)
			if gerr != nil || !domain.GuardOf(in).Matches(cur) {
				return domain.Changed{}, false, nil // the instance moved on
			}
			continue // its job moved on: decide again
		}
		if err != nil {
			return domain.Changed{}, false, fmt.Errorf("retire %s: %w", in.ID, err)
		}
		return done, true, sendRequeued(ctx, st, q, done.Jobs)
	}
	return domain.Changed{}, false, fmt.Errorf("retire %s: its job keeps changing", in.ID)
}

// servedJob returns the job in is bound to while it is still that
// instance's and not over (assigned or running), else nil.
func servedJob(ctx context.Context, st Store, in domain.Instance) (*domain.Job, error) {
	return jobOf(ctx, st, in, domain.JobAssigned, domain.JobRunning)
}
