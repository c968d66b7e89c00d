package provision

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// A job may have two launch messages: a redelivery on SQS, or a message
// sent while another was in hand. Before its create call, the provisioner
// marks the job with the instance it launches for it (Job.LaunchedOn, by
// domain.Lifecycle.LaunchFor, guarded on the job as read), so that a
// second provisioner holding the other message launches nothing while that
// instance may still serve the job. The mark binds nothing: the job stays
// queued and unbound until the handover. It holds while the instance's row
// is pending or booting for the job, until the row's deadline; before the
// row is written, for the pending allowance from the mark. A mark left by
// a provisioner that died ends so, and the job is served again; one whose
// machine boots without its runner ends sooner (domain.AbandonedLaunch).

// launchedElsewhere says another provisioner launches a machine for the
// job, and until when that launch may still serve it.
type launchedElsewhere struct {
	instance string
	until    time.Time
}

func (e *launchedElsewhere) Error() string { return "job already served by instance " + e.instance }

// waiting reports whether j still needs a runner: queued, and bound to no
// instance.
func waiting(j domain.Job) bool { return j.Status == domain.JobQueued && j.InstanceID == "" }

// launchUnderWay returns the launch j is marked with when it is not mine
// and may still serve j; nil when there is none.
func (p *Provisioner) launchUnderWay(ctx context.Context, j domain.Job, mine string) (*launchedElsewhere, error) {
	if !waiting(j) || j.LaunchedOn == "" || j.LaunchedOn == mine {
		return nil, nil
	}
	in, err := p.Store.GetInstance(ctx, j.LaunchedOn)
	var until time.Time
	switch {
	case errors.Is(err, domain.ErrNotFound):
		// Marked, its row not written yet; or never, when the provisioner
		// that marked it died in between.
		until = j.UpdatedAt.Add(p.opts.Deadlines.Pending)
	case err != nil:
		return nil, fmt.Errorf("read instance %s launched for job %d: %w", j.LaunchedOn, j.ID, err)
	case in.Job != j.Key() || (in.State != domain.StatePending && in.State != domain.StateBooting):
		return nil, nil // that launch is over
	case in.State == domain.StateBooting && in.RunnerName == "":
		// Its provisioner hands it over as soon as its fleet returns: one
		// still without its runner past the allowance was abandoned
		// (domain.AbandonedLaunch), minutes before its booting deadline.
		until = in.StateSince.Add(domain.HandoverAllowance)
		if in.Deadline.Before(until) {
			until = in.Deadline
		}
	default:
		until = in.Deadline
	}
	if !p.Clock.Now().Before(until) {
		return nil, nil
	}
	return &launchedElsewhere{instance: j.LaunchedOn, until: until}, nil
}

// waits says whether rq's job, as read now (j), still waits for a machine
// from rq: nil if it does, errGone when it no longer waits for a runner, a
// *launchedElsewhere when another provisioner launches one for it.
func (p *Provisioner) waits(ctx context.Context, rq *request, j domain.Job) error {
	if !waiting(j) {
		return errGone
	}
	le, err := p.launchUnderWay(ctx, j, rq.mark)
	if err != nil {
		return err
	}
	if le != nil {
		return le
	}
	return nil
}

// markRounds bounds how often a request whose job changed meanwhile is
// read and marked again.
const markRounds = 3

// mark records on each request's job the instance about to be launched
// for it and the runner it is served with (request.recorded), in one
// batch, and returns the requests marked, in order. A job that changed
// since it was read is read again: one that no longer waits, or that
// another provisioner marked, gets its reason and no machine.
func (p *Provisioner) mark(ctx context.Context, reqs []*request) []*request {
	ids := make(map[*request]string, len(reqs))
	for _, rq := range reqs {
		ids[rq] = p.launcher.ID("bp")
	}
	var marked []*request
	todo := reqs
	for range markRounds {
		if len(todo) == 0 {
			break
		}
		ts := make([]domain.JobTransitionRequest, len(todo))
		for i, rq := range todo {
			ts[i] = rq.recorded(p.verbs.LaunchFor(rq.job, ids[rq]))
		}
		res, err := p.Store.TransitionJobs(ctx, ts)
		if err != nil {
			for _, rq := range todo {
				rq.err = fmt.Errorf("mark job %d for its launch: %w", rq.job.ID, err)
			}
			return marked
		}
		var again []*request
		for i, r := range res {
			rq := todo[i]
			switch {
			case r.Err == nil:
				rq.job, rq.mark = r.Job, ids[rq]
				marked = append(marked, rq)
			case errors.Is(r.Err, domain.ErrConflict) || errors.Is(r.Err, domain.ErrNotFound):
				if !p.gone(ctx, rq) {
					again = append(again, rq)
				}
			default:
				rq.err = fmt.Errorf("mark job %d for its launch: %w", rq.job.ID, r.Err)
			}
		}
		todo = again
	}
	for _, rq := range todo {
		rq.err = fmt.Errorf("mark job %d for its launch: it keeps changing", rq.job.ID)
	}
	return marked
}

// deferTo settles the message of a job another provisioner launches a
// machine for: a copy goes back to the launch queue for when that launch's
// mark ends, and the caller deletes the message in hand. Should the
// launch serve the job, the copy finds it assigned and is dropped; should
// its provisioner die, the copy finds the mark over and the job is served.
func (p *Provisioner) deferTo(ctx context.Context, j domain.Job, le *launchedElsewhere) (string, error) {
	delay := min(max(le.until.Sub(p.Clock.Now()), p.opts.RequeueDelay), domain.MaxQueueDelay)
	req := domain.SendRequest{Body: jobs.Encode(j.ID), Delay: delay,
		DedupID: fmt.Sprintf("job-%d-%d-after-%s-%d", j.ID, j.Attempts, le.instance, le.until.Unix())}
	if err := p.Queue.Send(ctx, domain.QueueLaunch, []domain.SendRequest{req}); err != nil {
		return "", fmt.Errorf("defer job %d until its launch elsewhere ends: %w", j.ID, err)
	}
	p.Log.Info("launch job not served here: "+le.Error(), "job", j.ID, "instance", le.instance, "until", le.until)
	return outcomeDeferred, nil
}
