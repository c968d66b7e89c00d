package sqlite

import (
	"context"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

var jobKind = rowKind[int64, domain.Job, domain.JobGuard, domain.JobTransitionRequest, domain.JobTransitionResult]{
	noun: "job", batchOp: "transition jobs",
	get: selectJob, update: updateJob,
	read:  scanJob,
	apply: domain.ApplyJobTransition, normalize: normalizeJobTimes, validate: domain.Job.Validate,
	write: jobUpdateArgs,
	request: func(r domain.JobTransitionRequest) (int64, domain.JobGuard, func(*domain.Job)) {
		return r.ID, r.Guard, r.Apply
	},
	result: func(j domain.Job, refused error) domain.JobTransitionResult {
		return domain.JobTransitionResult{Job: j, Err: refused}
	},
}

// jobUpdateArgs returns the arguments of updateJob: every column but the
// id, then the id for the WHERE clause.
func jobUpdateArgs(j domain.Job) ([]any, error) {
	args, err := jobArgs(j)
	if err != nil {
		return nil, err
	}
	return append(args[1:], j.ID), nil
}

// TransitionJob applies fn to job id if it matches g, in one write
// transaction decided by domain.ApplyJobTransition. It returns ErrNotFound,
// a *domain.JobConflictError or a *domain.JobTransitionError. fn runs while
// the writer is held, so it must be quick and must not call the store.
func (s *Store) TransitionJob(ctx context.Context, id int64, g domain.JobGuard, fn func(*domain.Job)) (domain.Job, error) {
	return jobKind.transition(ctx, s, id, g, fn)
}

// TransitionJobs applies every request in one write transaction. Each
// request has its own outcome, in request order; the error is for the batch
// as a whole, in which case nothing was written.
func (s *Store) TransitionJobs(ctx context.Context, reqs []domain.JobTransitionRequest) ([]domain.JobTransitionResult, error) {
	return jobKind.transitionBatch(ctx, s, reqs)
}
