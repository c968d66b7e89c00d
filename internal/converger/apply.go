package converger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launch"
	"github.com/bullpen-ci/bullpen/internal/rebalance"
)

// applier carries out one pool's plan. Every change to a row is guarded by the
// version the plan was computed from, so an instance claimed for a job in the
// meantime is skipped, never stopped or terminated under the job.
type applier struct {
	c       *Converger
	now     time.Time
	spec    PoolSpec
	imageID string
	hash    string
}

func (a applier) apply(ctx context.Context, p rebalance.Plan) error {
	var errs []error
	// Terminations that free quota are merged into as few calls as possible;
	// they all precede the first create, as the rebalance order requires.
	var early []domain.Instance
	var earlyReasons []rebalance.Reason
	flush := func() {
		if len(early) > 0 {
			errs = append(errs, a.terminate(ctx, early, earlyReasons))
			early, earlyReasons = nil, nil
		}
	}
	for _, st := range p.Steps {
		a.count(st)
		switch st.Action {
		case rebalance.Settle:
			errs = append(errs, a.settle(ctx, st.Instances))
		case rebalance.Forget:
			errs = append(errs, a.forget(ctx, st.Instances, st.Reason))
		case rebalance.Terminate:
			if st.Reason == rebalance.ReasonExcess {
				flush()
				errs = append(errs, a.terminate(ctx, st.Instances, repeat(st.Reason, len(st.Instances))))
				continue
			}
			early = append(early, st.Instances...)
			earlyReasons = append(earlyReasons, repeat(st.Reason, len(st.Instances))...)
		case rebalance.Stop:
			flush()
			errs = append(errs, a.stop(ctx, st.Instances))
		case rebalance.Create:
			flush()
			errs = append(errs, a.create(ctx, st.Role, st.Count))
		}
	}
	flush()
	return errors.Join(errs...)
}

func (a applier) count(st rebalance.Step) {
	n := st.Count
	if st.Action != rebalance.Create {
		n = len(st.Instances)
	}
	a.c.metrics.actions.WithLabelValues(a.spec.Pool.Name, string(st.Action), string(st.Reason)).Add(float64(n))
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// transition applies verb to each instance (the i-th) and returns those
// that won; conflicts are expected (a job claimed the instance) and only
// counted.
func (a applier) transition(ctx context.Context, insts []domain.Instance, verb func(i int, in domain.Instance) domain.TransitionRequest) ([]domain.Instance, error) {
	reqs := make([]domain.TransitionRequest, len(insts))
	for i, in := range insts {
		reqs[i] = verb(i, in)
	}
	res, err := a.c.store.TransitionBatch(ctx, reqs)
	if err != nil {
		return nil, fmt.Errorf("pool %s: store: %w", a.spec.Pool.Name, err)
	}
	var won []domain.Instance
	var errs []error
	for i, r := range res {
		switch {
		case r.Err == nil:
			won = append(won, r.Instance)
		case errors.Is(r.Err, domain.ErrConflict), errors.Is(r.Err, domain.ErrNotFound):
			a.c.metrics.conflicts.Inc()
			a.c.log.Debug("instance changed since the plan; skipped", "pool", a.spec.Pool.Name, "instance", insts[i].ID, "err", r.Err)
		default:
			errs = append(errs, r.Err)
		}
	}
	return won, errors.Join(errs...)
}

func (a applier) settle(ctx context.Context, insts []domain.Instance) error {
	_, err := a.transition(ctx, insts, func(_ int, in domain.Instance) domain.TransitionRequest {
		return a.c.verbs.Stopped(in, a.now)
	})
	return err
}

// forget closes rows whose machine the cloud no longer has.
func (a applier) forget(ctx context.Context, insts []domain.Instance, why rebalance.Reason) error {
	marked, err := a.transition(ctx, insts, func(_ int, in domain.Instance) domain.TransitionRequest {
		return a.c.verbs.Terminate(in, string(why), a.now)
	})
	return errors.Join(err, a.closeRows(ctx, marked))
}

func (a applier) closeRows(ctx context.Context, insts []domain.Instance) error {
	_, err := a.transition(ctx, insts, func(_ int, in domain.Instance) domain.TransitionRequest { return a.c.verbs.Close(in) })
	return err
}

// terminate marks the rows first (so no claim can race the call), then
// terminates their machines at most MaxBatch per call, then closes the rows
// whose call succeeded. Rows of a failed call stay terminating and are
// retried next cycle.
func (a applier) terminate(ctx context.Context, insts []domain.Instance, why []rebalance.Reason) error {
	marked, err := a.transition(ctx, insts, func(i int, in domain.Instance) domain.TransitionRequest {
		return a.c.verbs.Terminate(in, string(why[i]), a.now)
	})
	errs := []error{err}
	var done []domain.Instance
	var withMachine []domain.Instance
	for _, in := range marked {
		if in.CloudID == "" {
			done = append(done, in) // the create never reached the cloud
		} else {
			withMachine = append(withMachine, in)
		}
	}
	for _, batch := range domain.Chunk(withMachine, domain.MaxBatch) {
		if err := a.c.cloud.Terminate(ctx, cloudIDs(batch)); err != nil {
			a.c.metrics.cloudErrors.WithLabelValues("TerminateInstances").Inc()
			errs = append(errs, fmt.Errorf("terminate %d instances: %w", len(batch), err))
			continue
		}
		done = append(done, batch...)
	}
	errs = append(errs, a.closeRows(ctx, done))
	return errors.Join(errs...)
}

// stop parks warmed stopped-pool members: rows first, then the cloud.
func (a applier) stop(ctx context.Context, insts []domain.Instance) error {
	marked, err := a.transition(ctx, insts, func(_ int, in domain.Instance) domain.TransitionRequest {
		return a.c.verbs.Stop(in, a.now)
	})
	errs := []error{err}
	for _, batch := range domain.Chunk(marked, domain.MaxBatch) {
		if err := a.c.cloud.Stop(ctx, cloudIDs(batch)); err != nil {
			a.c.metrics.cloudErrors.WithLabelValues("StopInstances").Inc()
			errs = append(errs, fmt.Errorf("stop %d instances: %w", len(batch), err))
		}
	}
	return errors.Join(errs...)
}

func cloudIDs(insts []domain.Instance) []string {
	ids := make([]string, len(insts))
	for i, in := range insts {
		ids[i] = in.CloudID
	}
	return ids
}

// create launches n members of role in calls of at most CreateBatch. Rows are
// written as pending before each call, carrying the call's launch id; after
// a crash between the two they expire, and the machines are reaped as
// orphans (see domain.StatePending).
func (a applier) create(ctx context.Context, role domain.Role, n int) error {
	var errs []error
	for n > 0 {
		k := min(n, a.c.opts.CreateBatch)
		n -= k
		if err := a.createBatch(ctx, role, k); err != nil {
			errs = append(errs, err)
			break // capacity or API trouble: the next cycle tries again
		}
	}
	return errors.Join(errs...)
}

func (a applier) createBatch(ctx context.Context, role domain.Role, n int) error {
	p, r := a.spec.Pool, a.spec.Runner
	rows := make([]domain.Instance, n)
	for i := range rows {
		rows[i] = domain.Instance{
			ID: a.c.launch.ID("bp"), Pool: p.Name, Role: role, Runner: r.Name, SpecHash: a.hash,
			CPU: r.CPU.Min, MemoryMiB: r.RAM.Min * 1024,
		}
	}
	res, err := a.c.launch.Launch(ctx, launch.Fleet{Rows: rows, Spec: r, Image: a.imageID, Tags: map[string]string{
		domain.TagPool: p.Name, domain.TagRole: string(role), domain.TagRunner: r.Name, domain.TagSpecHash: a.hash,
	}})
	if err != nil {
		if _, ok := errors.AsType[*domain.CloudError](err); ok {
			a.c.metrics.cloudErrors.WithLabelValues("CreateFleet").Inc()
		}
		err = fmt.Errorf("pool %s: create %d %s instances (got %d): %w", p.Name, n, role, len(res.Booted), err)
	}
	a.c.log.Debug("created instances", "pool", p.Name, "role", role, "asked", n, "booting", len(res.Booted),
		"abandoned", len(res.Closed))
	return err
}
