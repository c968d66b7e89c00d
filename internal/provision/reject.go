package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/rest"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/serving"
)

// rejection is a launch no retry will mend: the job's image does not
// resolve, or the cloud refuses the request as invalid. Its jobs are
// rejected with Error() as their reason instead of being retried until
// GitHub gives up on them.
type rejection struct {
	reason string // what is wrong, in the operator's terms
	err    error
}

func (r *rejection) Error() string { return r.reason + ": " + r.err.Error() }
func (r *rejection) Unwrap() error { return r.err }

// rejectable wraps a launch error of class in a *rejection when the cloud
// says it will never succeed as asked; unknownImage says which image it
// did not know. Other errors are returned as they are.
func rejectable(err error, class, unknownImage string) error {
	switch {
	case errors.Is(err, domain.ErrUnknownImage):
		return &rejection{reason: unknownImage, err: err}
	case errors.Is(err, domain.ErrInvalidRequest):
		return &rejection{reason: fmt.Sprintf("the cloud refuses the launch of runner %s as invalid", class), err: err}
	}
	return err
}

// Outcomes of a launch job, as the jobs metric counts them.
const (
	outcomeRequeued = "requeued"
	outcomeRejected = "rejected"
	// rejected_again: a job readmitted after a rejection, rejected once
	// more; counted apart, so that an alert on new rejections does not
	// count one job at each readmission.
	outcomeRejectedAgain = "rejected_again"
	outcomeDropped       = "dropped" // it no longer waits for a runner, or its message names none
	// deferred: another provisioner launches a machine for it; its message
	// comes back once that launch's mark ends.
	outcomeDeferred = "deferred"
)

// settle deletes the messages of served and rejected jobs and sends the
// others back to the launch queue with a backoff. A job whose fate could
// not be recorded keeps its message, which comes back after the
// visibility timeout.
func (p *Provisioner) settle(ctx context.Context, reqs []*request) {
	var done []string
	for _, rq := range reqs {
		outcome, err := p.settleOne(ctx, rq)
		if err != nil {
			p.Log.Warn("settle launch job", "job", rq.job.ID, "err", err)
			continue
		}
		p.metrics.jobs.WithLabelValues(outcome).Inc()
		done = append(done, rq.msg.Receipt)
	}
	if err := p.Queue.Delete(ctx, domain.QueueLaunch, done); err != nil {
		p.Log.Warn("delete provisioned launch messages", "err", err)
	}
}

func (p *Provisioner) settleOne(ctx context.Context, rq *request) (string, error) {
	switch rq.outcome {
	case domain.ViaReuse, domain.ViaCold:
		return string(rq.outcome), nil
	}
	if rej := (*rejection)(nil); errors.As(rq.err, &rej) {
		return p.reject(ctx, rq, rej)
	}
	return p.requeue(ctx, rq)
}

// stillWaiting re-reads rq's job to settle its message. When the job no
// longer waits for a machine from rq, settled is the outcome the message
// is settled with: dropped when it no longer waits for a runner, deferred
// when another provisioner launches one for it.
func (p *Provisioner) stillWaiting(ctx context.Context, rq *request) (j domain.Job, settled string, err error) {
	j, err = p.Store.GetJob(ctx, rq.job.ID)
	if errors.Is(err, domain.ErrNotFound) {
		return j, outcomeDropped, nil
	}
	if err != nil {
		return j, "", fmt.Errorf("re-read job: %w", err)
	}
	var le *launchedElsewhere
	switch err := p.waits(ctx, rq, j); {
	case err == nil:
		return j, "", nil
	case errors.As(err, &le):
		settled, err := p.deferTo(ctx, j, le)
		return j, settled, err
	case errors.Is(err, errGone):
		return j, outcomeDropped, nil
	default:
		return j, "", err
	}
}

// reject records that the job will not be served, and why, so that nobody
// waits for a runner that never comes.
func (p *Provisioner) reject(ctx context.Context, rq *request, rej *rejection) (string, error) {
	j, settled, err := p.stillWaiting(ctx, rq)
	if settled != "" || err != nil {
		return settled, err
	}
	r := p.verbs.RejectJob(j, rej.Error())
	j, err = p.Store.TransitionJob(ctx, r.ID, r.Guard, r.Apply)
	if err != nil {
		return "", fmt.Errorf("reject job: %w", err)
	}
	if j.Readmissions > 0 {
		p.Log.Warn("launch job rejected again after its readmission", "job", j.ID, "repo", j.Repo, "run", j.RunID, "runner", j.Runner,
			"readmissions", j.Readmissions, "reason", j.Reason)
		return outcomeRejectedAgain, nil
	}
	p.Log.Warn("launch job rejected", "job", j.ID, "repo", j.Repo, "run", j.RunID, "runner", j.Runner, "reason", j.Reason)
	return outcomeRejected, nil
}

// rateLimitPoll is how long a job whose runner GitHub refused for its
// rate limit waits before it is tried again, when the refusal does not
// say when the limit lifts.
const rateLimitPoll = 30 * time.Second

// repeatedRefusals is the attempt from which a job whose runner GitHub
// refuses is logged as an error: the first may be a settings change on
// its way, the third is not.
const repeatedRefusals = 3

// refusedByGitHub reports whether err is GitHub refusing to register a
// runner in a way no retry soon mends: the credentials or the App's
// permissions (401, 403 other than a rate limit), a runner group or scope
// it does not know (404), or a request it will not take (422: labels, a
// group the repository may not use).
func refusedByGitHub(err error) bool {
	if !errors.Is(err, serving.ErrRegistration) || errors.Is(err, domain.ErrRateLimited) {
		return false
	}
	var answer *rest.APIError
	if errors.As(err, &answer) {
		switch answer.Status {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusUnprocessableEntity:
			return true
		}
		return false
	}
	return errors.Is(err, rest.ErrUnauthorized) || errors.Is(err, domain.ErrUnauthorized) ||
		errors.Is(err, domain.ErrNotFound) || errors.Is(err, domain.ErrInvalidRequest)
}

// requeue sends an unserved job back with a growing delay, unless someone
// else sent it back already: whoever took its instance out of service
// (jobs.Retire: an agent that failed, the reaper, a spot interruption)
// sends its message and counts the attempt, and a second message would
// count it twice and could give the job a second machine.
func (p *Provisioner) requeue(ctx context.Context, rq *request) (string, error) {
	j, settled, err := p.stillWaiting(ctx, rq)
	if settled != "" || err != nil {
		return settled, err
	}
	if j.SendPending || j.Attempts != rq.attempts {
		p.Log.Info("launch job already sent back to its queue; not sending it again",
			"job", j.ID, "attempt", j.Attempts, "reason", j.Reason)
		return outcomeDropped, nil
	}
	why := ""
	if rq.err != nil {
		why = rq.err.Error()
	}
	r := p.verbs.RetryJob(j, why)
	j, err = p.Store.TransitionJob(ctx, r.ID, r.Guard, r.Apply)
	if err != nil {
		return "", fmt.Errorf("requeue job: %w", err)
	}
	delay := min(time.Duration(1<<min(j.Attempts, 6))*time.Second, time.Minute)
	level, msg := slog.LevelWarn, "launch job not served; retrying"
	switch {
	case errors.Is(rq.err, errStopped):
		level = slog.LevelDebug // not a fault: the process stops, and the loop says so once
	case refusedByGitHub(rq.err):
		// Only a change of the settings, the App or the labels mends
		// it: tried ever more slowly, and a human's from the third try.
		delay = jobs.RetryDelay(j.Attempts)
		msg = "GitHub refuses the job's runner: check the runner group, the GitHub App's permissions and the job's labels; retrying"
		if j.Attempts >= repeatedRefusals {
			level = slog.LevelError
		}
	}
	if errors.Is(rq.err, domain.ErrRateLimited) {
		// Not the job's fault, and it mends itself: the job comes back
		// when the limit lifts, and its mark is over meanwhile, so that
		// no launch waits for it.
		delay = max(delay, rateLimitPoll)
		level, msg = slog.LevelInfo, "runner registration refused for GitHub's rate limit; the job waits for the limit to lift"
	}
	var limited domain.RetryAt
	if errors.As(rq.err, &limited) {
		delay = min(max(delay, limited.RetryAt().Sub(p.Clock.Now())), domain.MaxQueueDelay)
	}
	p.Log.Log(ctx, level, msg, "job", j.ID, "instance", rq.tried, "attempt", j.Attempts, "in", delay, "reason", j.Reason)
	if err := p.Queue.Send(ctx, domain.QueueLaunch, []domain.SendRequest{jobs.SendRequest(j, delay)}); err != nil {
		return "", fmt.Errorf("requeue job: %w", err)
	}
	return outcomeRequeued, nil
}
