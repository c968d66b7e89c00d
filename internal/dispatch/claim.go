package dispatch

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// fillLastStart tops the batch up while its last start call would carry
// fewer than MaxBatch instances and more jobs are waiting: under a burst,
// every start call but the burst's last is full.
func (d *Dispatcher) fillLastStart(ctx context.Context, claimed, unserved []*item, done []string, res *Result) ([]*item, []*item, []string) {
	for range 5 {
		stopped := 0
		for _, it := range claimed {
			if it.wasStopped {
				stopped++
			}
		}
		short := (domain.MaxBatch - stopped%domain.MaxBatch) % domain.MaxBatch
		if short == 0 || len(unserved) > 0 {
			break // full, or the pools ran out of instances anyway
		}
		// A burst still arriving fills the call within a few lingers; after
		// the burst this costs that wait, once.
		wait := time.Duration(0)
		if d.opts.Wait >= 0 && d.opts.Linger > 0 {
			wait = 3 * d.opts.Linger
		}
		more, err := d.Queue.Receive(ctx, domain.QueuePool, short, d.opts.Visibility, wait)
		if err != nil || len(more) == 0 {
			break
		}
		res.Received += len(more)
		c, u, dn, err := d.take(ctx, more, res)
		// What the top-up claimed before an error is served with the
		// batch, which goes on; the rest of its messages come back after
		// the visibility timeout.
		claimed, done = append(claimed, c...), append(done, dn...)
		if err != nil {
			d.Log.Warn("topping the pool batch up failed", "claimed", len(c), "err", err)
			break
		}
		unserved = append(unserved, u...)
	}
	return claimed, unserved, done
}

// claim binds as many jobs of one pool as it can to the pool's idle
// instances, running ones first, each with one guarded transition (in one
// batch), so no instance is ever claimed twice.
func (d *Dispatcher) claim(ctx context.Context, pool string, items []*item) (claimed, unserved []*item, err error) {
	cands, err := d.candidates(ctx, pool)
	if err != nil {
		return nil, nil, err
	}
	now := d.Clock.Now()
	waiting := items
	for len(waiting) > 0 && len(cands) > 0 {
		k := min(len(waiting), len(cands))
		try, rest := cands[:k], cands[k:]
		reqs := make([]domain.TransitionRequest, k)
		for i := range k {
			reqs[i] = d.verbs.Claim(try[i], waiting[i].Job.Key(), now)
		}
		results, err := d.Store.TransitionBatch(ctx, reqs)
		if err != nil {
			// The earlier rounds' claims stand: the caller must serve them
			// or give them back.
			return claimed, nil, fmt.Errorf("claim instances of pool %s: %w", pool, err)
		}
		var still []*item
		for i, r := range results {
			it := waiting[i]
			if r.Err != nil {
				d.metrics.conflicts.Inc()
				still = append(still, it)
				continue
			}
			// How the job is served is decided from the instance as it was
			// claimed: its state and role change while it serves the job.
			it.Inst, it.wasStopped, it.Via = r.Instance, try[i].State == domain.StateStopped, domain.ViaClaim(try[i])
			claimed = append(claimed, it)
		}
		waiting, cands = append(still, waiting[k:]...), rest
	}
	return claimed, waiting, nil
}

// candidates lists a pool's idle instances in the order they should serve:
// running instances back from a job (reusable, no longer members), then
// running hot members, then stopped ones; the longest idle first within
// each group. A reusable instance goes first because taking a member makes
// the converger launch its replacement, while the reusable one would sit
// idle until its deadline.
func (d *Dispatcher) candidates(ctx context.Context, pool string) ([]domain.Instance, error) {
	rows, err := d.Store.ListInstances(ctx, domain.InstanceFilter{Pool: pool, States: []domain.State{domain.StateReady, domain.StateStopped}})
	if err != nil {
		return nil, fmt.Errorf("list instances of pool %s: %w", pool, err)
	}
	now, hash := d.Clock.Now(), d.SpecHash(ctx, pool)
	rank := func(in domain.Instance) int {
		switch {
		case in.State == domain.StateReady && in.Role == domain.RoleOnDemand:
			return 0
		case in.State == domain.StateReady:
			return 1
		}
		return 2
	}
	out := slices.DeleteFunc(rows, func(in domain.Instance) bool {
		// A reusable instance of the pool (back from a job) is held to the
		// pool's spec as its members are: it was launched with the same
		// spec hash, and one from before a roll must not take jobs ahead
		// of the rolled members.
		return in.Detached() || in.Expired(now) || (hash != "" && in.SpecHash != hash)
	})
	slices.SortStableFunc(out, func(a, b domain.Instance) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), a.StateSince.Compare(b.StateSince), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}
