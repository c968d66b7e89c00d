package demo

import (
	"context"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// openStatuses are the statuses of a job bullpen still has to serve.
var openStatuses = func() []domain.JobStatus {
	var out []domain.JobStatus
	for _, s := range domain.JobStatuses {
		if !s.Final() {
			out = append(out, s)
		}
	}
	return out
}()

// allServed reports whether every job of the run has been served at now:
// the scheduled ones have all arrived (and the generated ones stopped),
// the simulated GitHub's deliveries have all been taken in, and the store
// holds no job queued, assigned or running, nor one waiting for its re-run.
// An error reading any of it is a no: the run goes on.
func (w *world) allServed(ctx context.Context, now time.Time) bool {
	if int(w.arrived.Load()) < w.scheduled || now.Before(w.feedEnds) {
		return false
	}
	// A job GitHub has queued is in the inbox until the intake records it.
	inbox, err := w.a.Queue.Stats(ctx, domain.QueueInbox)
	if err != nil || inbox.Visible+inbox.InFlight+inbox.Delayed > 0 {
		return false
	}
	open, err := w.a.Store.ListJobs(ctx, domain.JobFilter{Statuses: openStatuses, Limit: 1})
	if err != nil || len(open) > 0 {
		return false
	}
	interrupted, err := w.a.Store.ListJobs(ctx, domain.JobFilter{ToRerun: true})
	if err != nil {
		return false
	}
	for _, j := range interrupted {
		if j.AwaitsRerun(now) {
			return false
		}
	}
	return true
}
