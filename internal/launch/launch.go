// Package launch makes the create calls of the cloud for every loop that
// launches machines (the converger for pool members, the provisioner for
// jobs): the rows are written pending before the call, so that a crash
// leaves a record the reaper can match by the launch tag; each machine is
// recorded on its row with the hash of its own bootstrap secret; rows the
// cloud did not fill are closed; and a spot runner class the spot circuit
// breaker keeps on-demand launches on-demand, whichever loop launches it.
package launch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Store is what a launch needs of the store.
type Store interface {
	CreateInstances(ctx context.Context, insts []domain.Instance) error
	TransitionBatch(ctx context.Context, reqs []domain.TransitionRequest) ([]domain.TransitionResult, error)
}

// Cloud is what a launch needs of the cloud.
type Cloud interface {
	Create(ctx context.Context, spec domain.LaunchSpec) ([]domain.CloudInstance, error)
	Terminate(ctx context.Context, ids []string) error
}

// Launcher launches fleets.
type Launcher struct {
	Store        Store
	Cloud        Cloud
	Clock        domain.Clock
	Verbs        domain.Lifecycle
	ControllerID string
	// AgentURL is where the new machines' agents reach the control plane.
	AgentURL string
	// SpotAllowed, when set, says whether a runner class may launch spot
	// machines now (the spot circuit breaker); when not, its spot fleets
	// launch on-demand.
	SpotAllowed func(runner string) bool
	// IDs draws the ids of instances and launches; domain.NewID when nil.
	// A simulation draws them from its seed, so that its runs repeat.
	IDs func(prefix string) string
}

// ID draws a new id with the given prefix ("bp" for an instance).
func (l *Launcher) ID(prefix string) string {
	if l.IDs == nil {
		return domain.NewID(prefix)
	}
	return l.IDs(prefix)
}

// Fleet is one create call: a row per machine (id, pool, role, runner,
// spec hash, job, size: the caller's, the id from ID; state, launch and
// times: the launcher's),
// the machine's spec and image, and tags besides the controller and launch.
type Fleet struct {
	Rows  []domain.Instance
	Spec  domain.RunnerSpec
	Image string
	Tags  map[string]string
	// Recorded, when set, is told the pending rows as soon as they are
	// written, before the cloud is called.
	Recorded func(rows []domain.Instance)
}

// Result is what a launch made: the rows the cloud filled, now booting, in
// row order, and the rows it did not fill, now closed.
type Result struct {
	Booted, Closed []domain.Instance
}

// Launch writes the fleet's rows as pending, makes one create call, records
// each machine on its row (booting) and closes the rows left unfilled. A
// context that ends after the rows are written no longer stops it. The
// error is the create call's (a partial fleet wraps ErrInsufficientCapacity
// and still returns what booted) or the store's.
func (l *Launcher) Launch(ctx context.Context, f Fleet) (Result, error) {
	launch, secret := l.ID("lt"), domain.NewSecret()
	now := l.Clock.Now()
	rows := l.pendingRows(f.Rows, launch, now)
	if err := l.Store.CreateInstances(ctx, rows); err != nil {
		return Result{}, fmt.Errorf("record %d new instances: %w", len(rows), err)
	}
	if f.Recorded != nil {
		f.Recorded(rows)
	}
	// Once the rows are written the launch runs to its end, whatever ends
	// the caller's context (a SIGTERM, a lease lost mid-step): a create
	// call cut short can launch machines no row records, and rows left
	// pending count as capacity on the way, holding back a pool's refills
	// until their deadline.
	ctx = context.WithoutCancel(ctx)
	machines, cerr := l.create(ctx, f, len(rows), launch, secret)
	reqs := l.outcomes(rows, machines, secret, cerr, now)
	res, err := l.Store.TransitionBatch(ctx, reqs)
	if err != nil {
		return Result{}, errors.Join(cerr, fmt.Errorf("record %d launched instances: %w", len(machines), err),
			l.terminate(ctx, machineIDs(machines)))
	}
	return l.settle(ctx, reqs, res, machines, cerr)
}

// pendingRows is the caller's rows stamped pending under the launch, with
// the pending deadline from now.
func (l *Launcher) pendingRows(in []domain.Instance, launch string, now time.Time) []domain.Instance {
	rows := make([]domain.Instance, len(in))
	for i, r := range in {
		r.State, r.LaunchID = domain.StatePending, launch
		r.Deadline = l.Verbs.Deadlines.Until(domain.StatePending, now)
		r.BootstrapHash = "" // set per machine once its id is known
		rows[i] = r
	}
	return rows
}

// create makes the fleet's one create call for count machines, on-demand
// when the spot circuit breaker keeps the runner class off spot. It returns
// at most count machines: any surplus is terminated, its error joined to
// the create call's.
func (l *Launcher) create(ctx context.Context, f Fleet, count int, launch, secret string) ([]domain.CloudInstance, error) {
	tags := map[string]string{domain.TagController: l.ControllerID, domain.TagLaunch: launch}
	for k, v := range f.Tags {
		tags[k] = v
	}
	spec := f.Spec
	if spec.Spot != "" && l.SpotAllowed != nil && !l.SpotAllowed(spec.Name) {
		spec.Spot = ""
	}
	machines, cerr := l.Cloud.Create(ctx, domain.LaunchSpec{
		Runner: spec, ImageID: f.Image, Count: count, ClientToken: launch, Tags: tags,
		Agent: domain.AgentBootstrap{URL: l.AgentURL, LaunchID: launch, Secret: secret},
	})
	if len(machines) > count { // never expected; leave no strays
		ids := machineIDs(machines[count:])
		machines = machines[:count]
		if err := l.Cloud.Terminate(ctx, ids); err != nil {
			cerr = errors.Join(cerr, fmt.Errorf("terminate %d surplus machines: %w", len(ids), err))
		}
	}
	return machines, cerr
}

// outcomes is a transition per row: launched for each row a machine filled
// (in order, with the hash of that machine's own secret), terminated for
// the rest with the create call's error as the reason.
func (l *Launcher) outcomes(rows []domain.Instance, machines []domain.CloudInstance, secret string, cerr error, now time.Time) []domain.TransitionRequest {
	reqs := make([]domain.TransitionRequest, 0, len(rows))
	for i, m := range machines {
		hash := domain.HashSecret(domain.MachineSecret(secret, m.ID))
		reqs = append(reqs, l.Verbs.Launched(rows[i], m, hash, now))
	}
	reason := "not fulfilled"
	if cerr != nil {
		reason = cerr.Error()
	}
	for _, r := range rows[len(machines):] {
		reqs = append(reqs, l.Verbs.Terminate(withVersion(r), reason, now))
	}
	return reqs
}

// settle reads the results of the outcomes' transitions: booted rows are
// kept, machines whose row failed to record are terminated, and terminated
// rows are closed at once. The error joins the create call's with every
// failure after it.
func (l *Launcher) settle(ctx context.Context, reqs []domain.TransitionRequest, res []domain.TransitionResult,
	machines []domain.CloudInstance, cerr error) (Result, error) {
	var out Result
	var closing []domain.TransitionRequest
	var unrecorded []string
	errs := []error{cerr}
	for i, r := range res {
		switch {
		case r.Err != nil:
			errs = append(errs, fmt.Errorf("record instance %s: %w", reqs[i].ID, r.Err))
			if i < len(machines) {
				unrecorded = append(unrecorded, machines[i].ID)
			}
		case i < len(machines):
			out.Booted = append(out.Booted, r.Instance)
		default:
			closing = append(closing, l.Verbs.Close(r.Instance)) // no machine to wait for
		}
	}
	errs = append(errs, l.terminate(ctx, unrecorded))
	if len(closing) > 0 {
		res, err := l.Store.TransitionBatch(ctx, closing)
		errs = append(errs, err)
		for _, r := range res {
			if r.Err != nil {
				errs = append(errs, r.Err)
				continue
			}
			out.Closed = append(out.Closed, r.Instance)
		}
	}
	return out, errors.Join(errs...)
}

// machineIDs is the cloud ids of the machines, in order.
func machineIDs(machines []domain.CloudInstance) []string {
	ids := make([]string, len(machines))
	for i, m := range machines {
		ids[i] = m.ID
	}
	return ids
}

// withVersion is a new row as the store stamps it (version 1).
func withVersion(in domain.Instance) domain.Instance {
	in.Version = 1
	return in
}

// terminate ends machines no row could record, rather than leave them to
// the reaper's orphan sweep.
func (l *Launcher) terminate(ctx context.Context, ids []string) error {
	var errs []error
	for _, batch := range domain.Chunk(ids, domain.MaxBatch) {
		if err := l.Cloud.Terminate(ctx, batch); err != nil {
			errs = append(errs, fmt.Errorf("terminate %d unrecorded machines: %w", len(batch), err))
		}
	}
	return errors.Join(errs...)
}
