package converger

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	calls   *cloudCalls // the pool's, for this cycle
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
		switch st.Action {
		case rebalance.Settle:
			errs = append(errs, a.settle(ctx, st.Instances, st.Reason))
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
			errs = append(errs, a.stop(ctx, st.Instances, st.Reason))
		case rebalance.Start:
			flush()
			errs = append(errs, a.start(ctx, st.Instances, st.Reason))
		case rebalance.Create:
			flush()
			errs = append(errs, a.create(ctx, st.Role, st.Reason, st.Count))
		}
	}
	flush()
	return errors.Join(errs...)
}

// What became of the instances a step planned to act on: the result label
// of bullpen_pool_actions_total, counted once the step is done.
const (
	resultOK       = "ok"       // the change was made
	resultConflict = "conflict" // the instance changed since the plan (a job claimed it): left alone
	resultError    = "error"    // the change failed; a later cycle, or the terminator, retries it
)

// tally counts n instances of a step by result.
func (a applier) tally(action rebalance.Action, why rebalance.Reason, result string, n int) {
	if n > 0 {
		a.c.metrics.actions.WithLabelValues(a.spec.Pool.Name, string(action), string(why), result).Add(float64(n))
	}
}

// lostAs is a transition's lost for a step whose instances share a reason.
func (a applier) lostAs(action rebalance.Action, why rebalance.Reason) func(int, string) {
	return func(_ int, result string) { a.tally(action, why, result, 1) }
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
// counted. Each instance that did not win is told to lost, if set, with
// its result (conflict or error).
func (a applier) transition(ctx context.Context, insts []domain.Instance, verb func(i int, in domain.Instance) domain.TransitionRequest,
	lost func(i int, result string)) ([]domain.Instance, error) {
	if lost == nil {
		lost = func(int, string) {}
	}
	reqs := make([]domain.TransitionRequest, len(insts))
	for i, in := range insts {
		reqs[i] = verb(i, in)
	}
	res, err := a.c.store.TransitionBatch(ctx, reqs)
	if err != nil {
		for i := range insts {
			lost(i, resultError)
		}
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
			lost(i, resultConflict)
			a.c.log.Debug("instance changed since the plan; skipped", "pool", a.spec.Pool.Name, "instance", insts[i].ID, "err", r.Err)
		default:
			lost(i, resultError)
			errs = append(errs, r.Err)
		}
	}
	return won, errors.Join(errs...)
}

func (a applier) settle(ctx context.Context, insts []domain.Instance, why rebalance.Reason) error {
	settled, err := a.transition(ctx, insts, func(_ int, in domain.Instance) domain.TransitionRequest {
		return a.c.verbs.Stopped(in, a.now)
	}, a.lostAs(rebalance.Settle, why))
	a.tally(rebalance.Settle, why, resultOK, len(settled))
	return err
}

// forget closes rows whose machine the cloud no longer has. A row marked
// but not closed stays terminating, for the terminator to close.
func (a applier) forget(ctx context.Context, insts []domain.Instance, why rebalance.Reason) error {
	marked, err := a.transition(ctx, insts, func(_ int, in domain.Instance) domain.TransitionRequest {
		return a.c.verbs.Terminate(in, string(why), a.now)
	}, a.lostAs(rebalance.Forget, why))
	closed, cerr := a.closeRows(ctx, marked)
	a.tally(rebalance.Forget, why, resultOK, len(closed))
	a.tally(rebalance.Forget, why, resultError, len(marked)-len(closed))
	return errors.Join(err, cerr)
}

func (a applier) closeRows(ctx context.Context, insts []domain.Instance) ([]domain.Instance, error) {
	return a.transition(ctx, insts, func(_ int, in domain.Instance) domain.TransitionRequest { return a.c.verbs.Close(in) }, nil)
}

// terminate marks the rows first (so no claim can race the call), then
// terminates their machines at most MaxBatch per call, then closes the rows
// whose machines are gone. Rows of a failed call stay terminating, for the
// terminator to retry, as do the rows of machines the cloud refused to
// terminate (protected from termination) while it took the others: the
// terminator asks again, less and less often, and warns.
func (a applier) terminate(ctx context.Context, insts []domain.Instance, why []rebalance.Reason) error {
	marked, err := a.transition(ctx, insts, func(i int, in domain.Instance) domain.TransitionRequest {
		return a.c.verbs.Terminate(in, string(why[i]), a.now)
	}, func(i int, result string) { a.tally(rebalance.Terminate, why[i], result, 1) })
	reasons := make(map[string]rebalance.Reason, len(insts))
	for i, in := range insts {
		reasons[in.ID] = why[i]
	}
	counted := func(insts []domain.Instance, result string) {
		for _, in := range insts {
			a.tally(rebalance.Terminate, reasons[in.ID], result, 1)
		}
	}
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
		err := a.c.cloud.Terminate(ctx, cloudIDs(batch))
		a.calls.note(err)
		if refused := domain.RefusedIDs(err); len(refused) > 0 {
			left, gone := split(batch, refused)
			counted(left, resultError)
			done = append(done, gone...)
			a.c.log.Info("the cloud refused to terminate machines; their rows stay terminating, for the terminator",
				"pool", a.spec.Pool.Name, "instances", len(left), "err", err)
			continue
		}
		if !domain.TerminateDone(err) {
			a.c.metrics.cloudErrors.WithLabelValues("TerminateInstances").Inc()
			counted(batch, resultError)
			errs = append(errs, fmt.Errorf("terminate %d instances: %w", len(batch), err))
			continue
		}
		if err != nil {
			a.c.log.Debug("machines gone before their terminate", "pool", a.spec.Pool.Name, "err", err)
		}
		done = append(done, batch...)
	}
	// Done once the machine is gone: a row left unclosed is the
	// terminator's to close.
	counted(done, resultOK)
	_, err = a.closeRows(ctx, done)
	return errors.Join(append(errs, err)...)
}

// stop parks warmed stopped-pool members, or hot members converted to
// stopped ones: rows first, then the cloud, so that a job that claims a
// member meanwhile keeps it running.
func (a applier) stop(ctx context.Context, insts []domain.Instance, why rebalance.Reason) error {
	verb := a.c.verbs.Stop
	if why == rebalance.ReasonConvert {
		verb = a.c.verbs.ConvertToStopped
	}
	marked, err := a.transition(ctx, insts, func(_ int, in domain.Instance) domain.TransitionRequest {
		return verb(in, a.now)
	}, a.lostAs(rebalance.Stop, why))
	errs := []error{err}
	for _, batch := range domain.Chunk(marked, domain.MaxBatch) {
		err := a.c.cloud.Stop(ctx, cloudIDs(batch))
		a.calls.note(err)
		if err != nil {
			failed, _ := notActedOn(batch, err)
			a.c.metrics.cloudErrors.WithLabelValues("StopInstances").Inc()
			a.tally(rebalance.Stop, why, resultOK, len(batch)-len(failed))
			a.tally(rebalance.Stop, why, resultError, len(failed))
			errs = append(errs, fmt.Errorf("stop %d instances: %w", len(failed), err))
			continue
		}
		a.tally(rebalance.Stop, why, resultOK, len(batch))
	}
	return errors.Join(errs...)
}

// start makes parked members hot: rows first (one guarded transition
// each, so that a job that claimed a member meanwhile keeps it), then the
// cloud, at most MaxBatch per call. A member whose machine the cloud did
// not start (the call failed, or it named the machine as gone or refused,
// one still stopping, say, while it started the others) is parked again,
// as it was; when the cloud had no capacity,
// the pool's starts are held for a while (startHold), and its next cycles
// create the hot members instead. A row left booting over a machine that
// did not start (its change back failed) ends as dangling, as a machine
// that never warmed.
func (a applier) start(ctx context.Context, insts []domain.Instance, why rebalance.Reason) error {
	parked := make(map[string]domain.Instance, len(insts))
	for _, in := range insts {
		parked[in.ID] = in
	}
	marked, err := a.transition(ctx, insts, func(_ int, in domain.Instance) domain.TransitionRequest {
		return a.c.verbs.ConvertToHot(in, a.now)
	}, a.lostAs(rebalance.Start, why))
	errs := []error{err}
	var notStarted []domain.Instance
	for _, batch := range domain.Chunk(marked, domain.MaxBatch) {
		err := a.c.cloud.Start(ctx, cloudIDs(batch))
		a.calls.note(err)
		if err == nil {
			a.tally(rebalance.Start, why, resultOK, len(batch))
			continue
		}
		a.c.metrics.cloudErrors.WithLabelValues("StartInstances").Inc()
		if errors.Is(err, domain.ErrInsufficientCapacity) {
			a.c.starts.refused(a.spec.Pool.Name, a.now)
		}
		// The cloud starts the machines it can and names the others: those
		// gone, parked again to be forgotten, and those it refused, parked
		// again to be started at a later cycle.
		failed, _ := notActedOn(batch, err)
		notStarted = append(notStarted, failed...)
		a.tally(rebalance.Start, why, resultOK, len(batch)-len(failed))
		a.tally(rebalance.Start, why, resultError, len(failed))
		errs = append(errs, fmt.Errorf("pool %s: start %d instances: %w", a.spec.Pool.Name, len(failed), err))
	}
	if len(notStarted) > 0 {
		_, err := a.transition(ctx, notStarted, func(_ int, in domain.Instance) domain.TransitionRequest {
			return a.c.verbs.StartFailed(in, parked[in.ID])
		}, nil)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// notActedOn returns the instances of batch whose machines a call that
// returned err left as they were, and the others. Where err does not name
// them, the whole batch failed.
func notActedOn(batch []domain.Instance, err error) (failed, acted []domain.Instance) {
	ids, named := domain.NotActedOn(err)
	if !named {
		return batch, nil
	}
	return split(batch, ids)
}

// split parts insts into those whose machine is among cloudIDs and the
// others.
func split(insts []domain.Instance, cloudIDs []string) (in, out []domain.Instance) {
	for _, i := range insts {
		if slices.Contains(cloudIDs, i.CloudID) {
			in = append(in, i)
		} else {
			out = append(out, i)
		}
	}
	return in, out
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
// orphans (see domain.StatePending). Members not booting at the end, those
// of the batches not tried after a failed one included, count as errors.
func (a applier) create(ctx context.Context, role domain.Role, why rebalance.Reason, n int) error {
	var err error
	booting := 0
	for left := n; left > 0; {
		k := min(left, a.c.opts.CreateBatch)
		left -= k
		var got int
		got, err = a.createBatch(ctx, role, k)
		booting += got
		if err != nil {
			break // capacity or API trouble: the next cycle tries again
		}
	}
	a.tally(rebalance.Create, why, resultOK, booting)
	a.tally(rebalance.Create, why, resultError, n-booting)
	return err
}

// createBatch launches n members of role in one call and returns how many
// are booting.
func (a applier) createBatch(ctx context.Context, role domain.Role, n int) (int, error) {
	p, r := a.spec.Pool, a.spec.Runner
	rows := make([]domain.Instance, n)
	for i := range rows {
		rows[i] = domain.Instance{
			ID: a.c.launch.ID("bp"), Pool: p.Name, Role: role, Runner: r.Name, SpecHash: a.hash,
			CPU: r.CPU.Min, MemoryMiB: r.RAM.Min * 1024,
		}
	}
	if role == domain.RoleStopped {
		// A spot instance of a one-time request, as a fleet launches them,
		// cannot be stopped: EC2 refuses, and the member would be retried,
		// expired and replaced for ever. Parked members run on-demand.
		r.Spot = ""
	}
	l := *a.c.launch
	l.Cloud = watchedCloud{Cloud: l.Cloud, calls: a.calls}
	res, err := l.Launch(ctx, launch.Fleet{Rows: rows, Spec: r, Image: a.imageID, Tags: map[string]string{
		domain.TagPool: p.Name, domain.TagRole: string(role), domain.TagRunner: r.Name, domain.TagSpecHash: a.hash,
	}})
	if err != nil {
		if _, ok := errors.AsType[*domain.CloudError](err); ok {
			a.c.metrics.cloudErrors.WithLabelValues("CreateFleet").Inc()
		}
		err = fmt.Errorf("pool %s: create %d %s instances (got %d): %w", p.Name, n, role, len(res.Booted), err)
	}
	a.c.warmups.launched(p.Name, res.Booted)
	a.c.log.Debug("created instances", "pool", p.Name, "role", role, "asked", n, "booting", len(res.Booted),
		"abandoned", len(res.Closed))
	return len(res.Booted), err
}
