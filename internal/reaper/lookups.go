package reaper

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// askedAt is when GitHub last answered about each job of one kind of
// look-up (stranded, waiting), so that the jobs are asked about in turn
// and none starves while GitHub keeps giving the same answer about others.
type askedAt map[int64]time.Time

// keep returns the answers about the jobs of js alone: a job that no
// longer needs looking up is forgotten.
func (a askedAt) keep(js []domain.Job) askedAt {
	kept := make(askedAt, len(js))
	for _, j := range js {
		if at, ok := a[j.ID]; ok {
			kept[j.ID] = at
		}
	}
	return kept
}

// inTurn orders js for a cycle's look-ups, those asked about least lately
// first, then the oldest by since, and keeps the first n.
func (a askedAt) inTurn(js []domain.Job, since func(domain.Job) time.Time, n int) []domain.Job {
	slices.SortStableFunc(js, func(x, y domain.Job) int {
		return cmp.Or(a[x.ID].Compare(a[y.ID]), since(x).Compare(since(y)), cmp.Compare(x.ID, y.ID))
	})
	return js[:min(len(js), n)]
}

// settleEach settles each job, counting those completed as GitHub reports
// them and those given up; err joins the store's errors.
func settleEach(js []domain.Job, settle func(domain.Job) (done, gaveUp bool, err error)) (completed, abandoned int, err error) {
	var errs []error
	for _, j := range js {
		done, gaveUp, err := settle(j)
		errs = append(errs, err)
		if done {
			completed++
		}
		if gaveUp {
			abandoned++
		}
	}
	return completed, abandoned, errors.Join(errs...)
}

// completion is the guarded change that records j's end at at, with
// conclusion and, when why is given, why bullpen ended it.
func completion(j domain.Job, at time.Time, conclusion, why string) domain.JobTransitionRequest {
	c := domain.Lifecycle{}.CompleteJob(j, at, conclusion)
	if why != "" {
		complete := c.Apply
		c.Apply = func(x *domain.Job) { complete(x); x.Reason = why }
	}
	return c
}

// byID indexes the cycle's instance rows.
func byID(rows []domain.Instance) map[string]domain.Instance {
	listed := make(map[string]domain.Instance, len(rows))
	for _, in := range rows {
		listed[in.ID] = in
	}
	return listed
}
