package dynamodb

import (
	"context"
	"fmt"
	"time"

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
			s.refused(rowTransaction, false)
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

// staged are the rows of one kind that a change touches, in the order it
// first touches them.
type staged[ID comparable, Row, Guard, Req, Res any] struct {
	kind  *rowKind[ID, Row, Guard, Req, Res]
	rows  map[ID]*pending[Row]
	order []ID
}

func newStaged[ID comparable, Row, Guard, Req, Res any](k *rowKind[ID, Row, Guard, Req, Res]) *staged[ID, Row, Guard, Req, Res] {
	return &staged[ID, Row, Guard, Req, Res]{kind: k, rows: map[ID]*pending[Row]{}}
}

// apply decides one transition on the row as the change has left it so
// far, reading it first if the change has not touched it yet. refused is
// the transition's refusal; err a failed read.
func (st *staged[ID, Row, Guard, Req, Res]) apply(ctx context.Context, s *Store, now time.Time, id ID, g Guard, fn func(*Row)) (next Row, refused, err error) {
	p, ok := st.rows[id]
	if !ok {
		cur, found, err := st.kind.get(ctx, s, id)
		if err != nil {
			return next, nil, fmt.Errorf("%s %v: %w", st.kind.noun, id, err)
		}
		if !found {
			return next, fmt.Errorf("%s %v: %w", st.kind.noun, id, domain.ErrNotFound), nil
		}
		p = &pending[Row]{cur: cur, next: cur}
		st.rows[id] = p
		st.order = append(st.order, id)
	}
	if fn == nil {
		fn = func(*Row) {}
	}
	if next, refused = st.kind.decide(p.next, g, now, fn); refused != nil {
		return next, refused, nil
	}
	p.next = next
	return next, nil, nil
}

// applyAll decides reqs in order, each on the rows as the ones before it
// left them, up to the first refused.
func (st *staged[ID, Row, Guard, Req, Res]) applyAll(ctx context.Context, s *Store, now time.Time, reqs []Req) (rows []Row, refused, err error) {
	rows = make([]Row, len(reqs))
	for n, r := range reqs {
		id, g, fn := st.kind.request(r)
		if rows[n], refused, err = st.apply(ctx, s, now, id, g, fn); refused != nil || err != nil {
			return rows, refused, err
		}
	}
	return rows, nil, nil
}

// writes are the conditional updates that make the staged rows so.
func (st *staged[ID, Row, Guard, Req, Res]) writes(s *Store) ([]types.TransactWriteItem, error) {
	var out []types.TransactWriteItem
	for _, id := range st.order {
		u, err := st.kind.update(s, st.rows[id].cur, st.rows[id].next)
		if err != nil {
			return nil, err
		}
		out = append(out, u.transact(s.table))
	}
	return out, nil
}

// decideChange reads the rows of c and applies its transitions in order,
// each seeing the ones before it. writes are the conditional updates that
// make it so; refused is the first transition refused.
func (s *Store) decideChange(ctx context.Context, c domain.Change) (out domain.Changed, writes []types.TransactWriteItem, refused, err error) {
	now := s.now()
	insts, jobs := newStaged(&instanceKind), newStaged(&jobKind)
	if out.Instances, refused, err = insts.applyAll(ctx, s, now, c.Instances); refused != nil || err != nil {
		return out, nil, refused, err
	}
	if out.Jobs, refused, err = jobs.applyAll(ctx, s, now, c.Jobs); refused != nil || err != nil {
		return out, nil, refused, err
	}
	if writes, err = insts.writes(s); err != nil {
		return out, nil, nil, err
	}
	jw, err := jobs.writes(s)
	return out, append(writes, jw...), nil, err
}
