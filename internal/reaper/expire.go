package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// Expire marks every row past its deadline as terminating, in any state
// (the provisioning design: "expired instances are terminated asynchronously by other
// components"), guarded on the version read so that a claim racing the
// sweep wins or loses cleanly. The terminator then makes the cloud calls.
// It reports how many rows it marked.
func (t *Terminator) Expire(ctx context.Context) (int, error) {
	marked, err := t.expire(ctx)
	t.metrics.add(actionExpired, marked)
	return marked, err
}

func (t *Terminator) expire(ctx context.Context) (int, error) {
	now := t.Clock.Now()
	rows, err := t.Store.ListInstances(ctx, domain.InstanceFilter{States: expirableStates(), ExpiredAt: now})
	if err != nil {
		return 0, fmt.Errorf("list instances: %w", err)
	}
	var reqs []domain.TransitionRequest
	var expiring []domain.Instance // the rows of reqs, as read
	marked := 0
	var errs []error
	agentsBack := now.Sub(t.heard.look(now, max(t.AgentGrace/2, 2*t.every()))) >= t.agentAllowance()
	for _, in := range rows {
		if !agentsBack && (agentExpected(in.State) || in.State == domain.StateBooting) {
			continue
		}
		if !in.Expired(now) || now.Before(t.expiresAt(in)) {
			continue
		}
		why := expiryReason(in)
		if in.Job != "" && !in.JobStarted {
			// Its job goes back to its queue in the same change.
			until := t.verbs().Deadlines.Until(domain.StateTerminating, now)
			_, ok, err := jobs.Retire(ctx, t.Store, t.Queue, in, domain.StateTerminating, why, until)
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				marked++
				t.noteExpired(ctx, in, why, "its job back in the queue if still bound to it")
			}
			continue
		}
		reqs = append(reqs, t.verbs().Terminate(in, why, now))
		expiring = append(expiring, in)
	}
	if len(reqs) == 0 {
		return marked, errors.Join(errs...)
	}
	res, err := t.Store.TransitionBatch(ctx, reqs)
	if err != nil {
		return marked, errors.Join(append(errs, err)...)
	}
	for i, r := range res {
		switch {
		case r.Err == nil:
			marked++
			t.noteExpired(ctx, expiring[i], r.Instance.Reason, "")
		case !errors.Is(r.Err, domain.ErrConflict):
			errs = append(errs, r.Err)
		}
	}
	return marked, errors.Join(errs...)
}

// expiresAt is when Expire ends in: at its deadline, except that a job
// that started is not cut short before the running deadline, counted from
// when the row entered its state. A row running such a job has that
// deadline already; one booting or claimed whose job GitHub saw start has
// it as a backstop, so that an agent that hangs, with the job's completed
// webhook lost, does not keep its machine for good. A row in error ends at
// its own deadline all the same: its agent said its runner is gone, and
// the job, which stays bound to it, is completed as GitHub reports it once
// the row is terminated (strandedJobs).
func (t *Terminator) expiresAt(in domain.Instance) time.Time {
	if !in.JobStarted || in.State == domain.StateRunning || in.State == domain.StateError {
		return in.Deadline
	}
	return maxTime(in.Deadline, in.StateSince.Add(t.verbs().Deadlines.Running))
}

// expiryReason is the reason recorded on a row Expire ends. A row leaving
// service for a spot interruption keeps why it left: its deadline was the
// time the cloud gave notice of.
func expiryReason(in domain.Instance) string {
	at := in.Deadline.UTC().Format(time.RFC3339)
	if in.Leaving() {
		return fmt.Sprintf("%s; the machine's notice time passed at %s", in.Reason, at)
	}
	return fmt.Sprintf("deadline of state %s passed at %s", in.State, at)
}

// noteExpired counts a row Expire ended, by the state it was in, and logs
// it. Two ends are logged at WARN, as they are not what the row was
// meant for: a release that timed out (its agent did not deregister in
// time, most often because the runner's clean-up command had not
// finished; the machine is never pooled) and a job killed at the running
// deadline. then says what else the change did, if anything.
func (t *Terminator) noteExpired(ctx context.Context, in domain.Instance, why, then string) {
	t.metrics.expiredIn(in.State)
	attrs := []any{"instance", in.ID, "state", in.State, "deadline", in.Deadline, "reason", why}
	if in.Job != "" {
		attrs = append(attrs, "job", in.Job)
	}
	if then != "" {
		attrs = append(attrs, "then", then)
	}
	level, msg := slog.LevelInfo, "instance past its deadline; terminating"
	switch {
	case in.State == domain.StateReleasing:
		level, msg = slog.LevelWarn, "release timed out: the runner's clean-up did not finish before the releasing deadline; terminating the instance, never pooled"
	case in.Leaving():
		msg = "instance taken back by the cloud reached its notice time; terminating"
	case in.State == domain.StateRunning && in.JobStarted:
		level, msg = slog.LevelWarn, "job still running at the running deadline; terminating its instance, which cuts the job short"
	}
	t.log().Log(ctx, level, msg, attrs...)
}
