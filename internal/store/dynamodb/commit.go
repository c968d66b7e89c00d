package dynamodb

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Commit reads every row of c consistently, decides its transitions in
// order, and writes the rows in one TransactWriteItems, each conditioned
// on the version read: all or none. When another writer moved one of the
// rows meanwhile, it decides again from the rows as they are.
func (s *Store) Commit(ctx context.Context, c domain.Change) (domain.Changed, error) {
	if err := s.checkOpen(); err != nil {
		return domain.Changed{}, fmt.Errorf("commit change: %w", err)
	}
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return domain.Changed{}, err
		}
		out, writes, refused, err := s.decideChange(ctx, c)
		if err != nil {
			return domain.Changed{}, fmt.Errorf("commit change: %w", err)
		}
		if refused != nil {
			return domain.Changed{}, refused
		}
		if len(writes) == 0 {
			return out, nil
		}
		if len(writes) > maxTransact {
			return domain.Changed{}, fmt.Errorf("commit change: %d rows, more than one transaction's %d", len(writes), maxTransact)
		}
		err = s.transact(ctx, writes)
		if reasons := cancelled(err); reasons != nil && retryable(reasons) {
			continue
		}
		if err != nil {
			return domain.Changed{}, fmt.Errorf("commit change: %w", err)
		}
		return out, nil
	}
	return domain.Changed{}, fmt.Errorf("commit change: %w", errContended)
}

// CommitEach commits the changes in parallel, each on its own.
func (s *Store) CommitEach(ctx context.Context, cs []domain.Change) ([]domain.ChangeResult, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("commit changes: %w", err)
	}
	results := make([]domain.ChangeResult, len(cs))
	s.parallel(len(cs), func(k int) {
		out, err := s.Commit(ctx, cs[k])
		results[k] = domain.ChangeResult{Changed: out, Err: err}
	})
	return results, nil
}

// pending is one row of a change: as read, and as the change leaves it.
type pending[Row any] struct {
	cur, next Row
}

// decideChange reads the rows of c and applies its transitions in order,
// each seeing the ones before it. writes are the conditional updates that
// make it so; refused is the first transition refused.
func (s *Store) decideChange(ctx context.Context, c domain.Change) (out domain.Changed, writes []types.TransactWriteItem, refused, err error) {
	now := s.now()
	out = domain.Changed{Instances: make([]domain.Instance, len(c.Instances)), Jobs: make([]domain.Job, len(c.Jobs))}
	insts := map[string]*pending[domain.Instance]{}
	var instOrder []string
	for n, r := range c.Instances {
		p, ok := insts[r.ID]
		if !ok {
			cur, found, err := instanceKind.get(ctx, s, r.ID)
			if err != nil {
				return out, nil, nil, fmt.Errorf("instance %s: %w", r.ID, err)
			}
			if !found {
				return out, nil, fmt.Errorf("instance %s: %w", r.ID, domain.ErrNotFound), nil
			}
			p = &pending[domain.Instance]{cur: cur, next: cur}
			insts[r.ID] = p
			instOrder = append(instOrder, r.ID)
		}
		fn := r.Apply
		if fn == nil {
			fn = func(*domain.Instance) {}
		}
		next, refusal := instanceKind.decide(p.next, r.Guard, now, fn)
		if refusal != nil {
			return out, nil, refusal, nil
		}
		p.next, out.Instances[n] = next, next
	}
	jobs := map[int64]*pending[domain.Job]{}
	var jobOrder []int64
	for n, r := range c.Jobs {
		p, ok := jobs[r.ID]
		if !ok {
			cur, found, err := jobKind.get(ctx, s, r.ID)
			if err != nil {
				return out, nil, nil, fmt.Errorf("job %d: %w", r.ID, err)
			}
			if !found {
				return out, nil, fmt.Errorf("job %d: %w", r.ID, domain.ErrNotFound), nil
			}
			p = &pending[domain.Job]{cur: cur, next: cur}
			jobs[r.ID] = p
			jobOrder = append(jobOrder, r.ID)
		}
		fn := r.Apply
		if fn == nil {
			fn = func(*domain.Job) {}
		}
		next, refusal := jobKind.decide(p.next, r.Guard, now, fn)
		if refusal != nil {
			return out, nil, refusal, nil
		}
		p.next, out.Jobs[n] = next, next
	}
	for _, id := range instOrder {
		u, err := instanceKind.update(s, insts[id].cur, insts[id].next)
		if err != nil {
			return out, nil, nil, err
		}
		writes = append(writes, u.transact(s.table))
	}
	for _, id := range jobOrder {
		u, err := jobKind.update(s, jobs[id].cur, jobs[id].next)
		if err != nil {
			return out, nil, nil, err
		}
		writes = append(writes, u.transact(s.table))
	}
	return out, writes, nil, nil
}
