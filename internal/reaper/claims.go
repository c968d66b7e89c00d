package reaper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// staleClaims takes out of service the instances left claimed for a job
// that no longer needs them: served by another instance, ended, or gone.
// A claimer that is alive rolls its own claim back when the job goes
// elsewhere; one that died (a crash, a replica killed mid-claim) leaves
// the claim to its deadline, minutes away, while the instance serves
// nothing. A machine launched for a job and still booting is such a claim
// too: a provisioner that died before the handover leaves it to its
// booting deadline (10 min) while the job's message, back in its queue,
// gets another machine; and since the handover follows the fleet at once,
// one still without its runner past domain.HandoverAllowance is abandoned
// whatever its job's state. The claim must be StaleClaimAfter old, so that
// a claim in progress is never judged on the job it has not yet bound.
func (r *Reconciler) staleClaims(ctx context.Context, rows []domain.Instance) (int, error) {
	now := r.Clock.Now()
	var errs []error
	taken := 0
	for _, in := range rows {
		if !claimFor(in) || in.JobStarted || in.Job == "" || now.Sub(in.StateSince) < r.StaleClaimAfter {
			continue
		}
		why, stale, err := r.claimStale(ctx, in, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !stale {
			continue
		}
		_, ok, err := jobs.Retire(ctx, r.Store, r.Queue, in, domain.StateTerminating, why, now.Add(r.TerminatingAllowance))
		if err != nil {
			errs = append(errs, fmt.Errorf("end the stale claim of %s: %w", in.ID, err))
		}
		if ok {
			taken++
			r.Log.Warn("instance claimed for a job it will not serve; terminating it", "instance", in.ID, "job", in.Job, "reason", why)
		}
	}
	return taken, errors.Join(errs...)
}

// claimFor says whether in is held for a job it has not been handed yet:
// claimed, or launched for it and booting.
func claimFor(in domain.Instance) bool {
	return in.State == domain.StateClaimed || (in.State == domain.StateBooting && in.Role == domain.RoleOnDemand)
}

// claimStale says whether in's claim is for a job that does not need it,
// or was abandoned, and why.
func (r *Reconciler) claimStale(ctx context.Context, in domain.Instance, now time.Time) (string, bool, error) {
	id, err := domain.ParseJobKey(in.Job)
	if err != nil {
		return "claimed for a job whose key is not a job id", true, nil
	}
	j, err := r.Store.GetJob(ctx, id)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return "claimed for a job the store no longer has", true, nil
	case err != nil:
		return "", false, fmt.Errorf("the job of claimed instance %s: %w", in.ID, err)
	case j.Status.Final():
		return fmt.Sprintf("claimed for job %d, which has ended (%s)", id, j.Status), true, nil
	case j.InstanceID != "" && j.InstanceID != in.ID:
		return fmt.Sprintf("claimed for job %d, which instance %s serves", id, j.InstanceID), true, nil
	case j.InstanceID != in.ID && domain.AbandonedLaunch(in, now):
		return fmt.Sprintf("launched for job %d and never handed its runner: its provisioner stopped before the handover", id), true, nil
	}
	return "", false, nil
}
