package dynamodb

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// CreateJobs puts each job on condition that its id is free, in parallel:
// the port asks for no atomicity across jobs, and a job that exists is
// left untouched.
func (s *Store) CreateJobs(ctx context.Context, jobs []domain.Job) ([]bool, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("create jobs: %w", err)
	}
	for _, j := range jobs {
		if err := j.Validate(); err != nil {
			return nil, fmt.Errorf("create jobs: %w", err)
		}
	}
	now := s.now()
	created := make([]bool, len(jobs))
	errs := make([]error, len(jobs))
	// A job named twice in one call is created by its first mention only,
	// as if the puts ran in order.
	first := make(map[int64]bool, len(jobs))
	var puts []int
	for k, j := range jobs {
		if !first[j.ID] {
			first[j.ID] = true
			puts = append(puts, k)
		}
	}
	s.parallel(len(puts), func(n int) {
		k := puts[n]
		j := jobs[k]
		j.Version, j.CreatedAt, j.UpdatedAt = 1, now, now
		utcTimes(&j)
		item, err := s.jobItem(j)
		if err != nil {
			errs[k] = err
			return
		}
		// The put carries a write mark, as transitions do: a refusal that
		// finds the row holding it answers the SDK's retry of a put whose
		// first answer was lost, and the job was created here.
		mark := writeMark()
		item[attrMark] = &types.AttributeValueMemberS{Value: mark}
		_, err = s.api.PutItem(ctx, &awsdynamodb.PutItemInput{TableName: s.tbl(), Item: item,
			ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
		switch {
		case isConditionFailed(err):
			created[k] = refusedBy(err, mark)
		case err != nil:
			errs[k] = fmt.Errorf("job %d: %w", j.ID, describe("PutItem", s.table, err))
		default:
			created[k] = true
		}
	})
	for _, err := range errs {
		if err != nil {
			return created, fmt.Errorf("create jobs: %w", err)
		}
	}
	return created, nil
}

// GetJob reads the row consistently.
func (s *Store) GetJob(ctx context.Context, id int64) (domain.Job, error) {
	return jobKind.read(ctx, s, id)
}

// ListJobs reads the jobs by id when the filter names them, else queries
// the index of its most selective field, and checks the rest on the rows;
// with a limit, it reads no more of the index than it needs (rowKind.find),
// and with a position, none of it before the position.
func (s *Store) ListJobs(ctx context.Context, f domain.JobFilter) ([]domain.Job, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	ls := jobLookups(f)
	if f.After != nil {
		if err := domain.CheckTime("position", f.After.CreatedAt); err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		ls = pastOrder(ls, order(f.After.CreatedAt, jobOrderID(f.After.ID)))
	}
	var out []domain.Job
	var err error
	if len(f.IDs) > 0 {
		out, err = s.jobsByID(ctx, f)
	} else {
		out, err = jobKind.find(ctx, s, ls, f.Newest, f.Limit, func(j domain.Job) bool { return matchesJob(j, f) })
	}
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobKind.listing(out, f.Newest, f.Limit), nil
}

// jobLookups are the index queries that find every job f keeps.
func jobLookups(f domain.JobFilter) []lookup {
	switch {
	case f.Instance != "":
		return []lookup{{index: indexLink, attr: attrLink, value: kindJob + "#" + f.Instance}}
	case f.ToRerun:
		return []lookup{{index: indexRerun, attr: attrRerun, value: kindJob}}
	}
	return poolLookups(kindJob, f.Pool, f.Statuses, domain.JobStatus.Final)
}

func matchesJob(j domain.Job, f domain.JobFilter) bool {
	switch {
	case len(f.IDs) > 0 && !slices.Contains(f.IDs, j.ID),
		len(f.Statuses) > 0 && !slices.Contains(f.Statuses, j.Status),
		f.Pool != "" && j.Pool != f.Pool,
		f.Instance != "" && j.InstanceID != f.Instance,
		!f.UpdatedBefore.IsZero() && !j.UpdatedAt.Before(f.UpdatedBefore),
		f.ToRerun && !(j.Interrupted && !j.Rerun),
		!f.After.Passed(j.CreatedAt, j.ID, f.Newest):
		return false
	}
	return true
}

// jobsByID reads the jobs f names consistently and keeps those f keeps.
func (s *Store) jobsByID(ctx context.Context, f domain.JobFilter) ([]domain.Job, error) {
	ids := slices.Compact(slices.Sorted(slices.Values(f.IDs)))
	keys := make([]map[string]types.AttributeValue, len(ids))
	for k, id := range ids {
		keys[k] = jobKey(id)
	}
	items, err := s.batchGet(ctx, keys)
	if err != nil {
		return nil, err
	}
	return jobKind.matching(items, func(j domain.Job) bool { return matchesJob(j, f) })
}

// TransitionJob is one guarded job transition, as Transition for instances.
func (s *Store) TransitionJob(ctx context.Context, id int64, g domain.JobGuard, fn func(*domain.Job)) (domain.Job, error) {
	return jobKind.transition(ctx, s, id, g, fn)
}

// TransitionJobs applies the requests as parallel conditional writes.
func (s *Store) TransitionJobs(ctx context.Context, reqs []domain.JobTransitionRequest) ([]domain.JobTransitionResult, error) {
	return jobKind.transitionBatch(ctx, s, reqs)
}

// DeleteJobs deletes final jobs last changed before the instant. A final
// job changes again only to take its re-run mark or its conclusion, which
// an expired one does not need, so no condition is needed.
//
// Only the rows created before the instant are read: a key condition on
// ord, which starts with the creation time, so a cycle reads the jobs
// that aged out since the last one, not the whole retention's. A row is
// created no later than it is last changed (both on the clock of the
// replica writing it), so every job changed before the instant was
// created before it too and is among those read. A job created before the
// instant but changed after it is read and kept (the check on the change
// time, as before): it goes once the instant passes its last change, on a
// later cycle, never early. Should a replica's clock run behind another's
// and a job's last change be stamped before its creation, it goes once
// the instant passes its creation, later by at most the clocks' gap, and
// never stays for good, since the instant moves on every cycle.
func (s *Store) DeleteJobs(ctx context.Context, before time.Time) (int, error) {
	if err := s.checkOpen(); err != nil {
		return 0, fmt.Errorf("delete jobs: %w", err)
	}
	f := domain.JobFilter{Statuses: []domain.JobStatus{domain.JobCompleted, domain.JobRejected}, UpdatedBefore: before}
	ls := partitionLookups(kindJob, f.Statuses)
	for k := range ls {
		ls[k].before = formatTime(before)
	}
	old, err := jobKind.find(ctx, s, ls, f.Newest, f.Limit, func(j domain.Job) bool { return matchesJob(j, f) })
	if err != nil {
		return 0, fmt.Errorf("delete jobs: %w", err)
	}
	keys := make([]map[string]types.AttributeValue, len(old))
	for k, j := range old {
		keys[k] = jobKey(j.ID)
	}
	if err := s.deleteKeys(ctx, keys); err != nil {
		return 0, fmt.Errorf("delete jobs: %w", err)
	}
	return len(old), nil
}
