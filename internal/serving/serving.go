// Package serving is the one way a job gets an instance. The pool
// dispatcher and the provisioner differ only in how they find the instance
// (a warm pool member, an idle instance from the resource pool, a new
// machine); from a claimed instance on, both use this pipeline: register the
// job's just-in-time runner, assign the job and give the instance its runner
// in one atomic change, wake the instance's agent, and, when the instance
// will not serve after all, roll the job and the instance back together.
package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Store is what the pipeline needs of the store.
type Store interface {
	GetJob(ctx context.Context, id int64) (domain.Job, error)
	GetInstance(ctx context.Context, id string) (domain.Instance, error)
	Commit(ctx context.Context, c domain.Change) (domain.Changed, error)
	CommitEach(ctx context.Context, cs []domain.Change) ([]domain.ChangeResult, error)
}

// GitHub is what the pipeline needs of GitHub.
type GitHub interface {
	RegisterRunner(ctx context.Context, s domain.Scope, name string, labels []string) (domain.RunnerRegistration, error)
	DeleteRunner(ctx context.Context, s domain.Scope, id int64) error
}

// Pipeline hands claimed instances to their jobs.
type Pipeline struct {
	Store  Store
	GitHub GitHub
	Clock  domain.Clock
	Log    *slog.Logger
	Verbs  domain.Lifecycle
	// Scope says where a job's runner registers.
	Scope func(j domain.Job) domain.Scope
	// Notify wakes an instance's agent; nil wakes none.
	Notify func(cloudID string)
	// Parallelism bounds concurrent runner registrations; default 16.
	Parallelism int
}

// Handover is one job on its way to an instance.
type Handover struct {
	Job  domain.Job      // the job as last read, waiting for this instance
	Inst domain.Instance // claimed (or created) for the job and bound to it
	Via  domain.Via
	// Runner and Spec, when Runner is set, are the class and machine the
	// job is served with, as the configuration in force gives them: the
	// assignment records them on the job, whose row is what the API and a
	// spot interruption's re-run read as its runner. An empty Runner
	// leaves the job's own.
	Runner string
	Spec   domain.RunnerSpec
	// Reg is the runner registered for the job on Inst, until the job has
	// it for good or it is deleted.
	Reg domain.RunnerRegistration
	Err error // why this handover failed; a failed one is skipped
}

// ErrRegistration wraps why a handover's runner could not be registered.
var ErrRegistration = errors.New("register runner")

// HandOver registers the runner of every handover without an error and
// without a runner yet (Register), then commits each one's assignment (the job assigned with its runner, the
// instance given that runner: one atomic change each, all in one batch),
// then wakes the assigned instances' agents. Handovers that fail get Err
// and keep Reg, so that RollBack can delete the runner.
func (p *Pipeline) HandOver(ctx context.Context, hs []*Handover) (ok, failed []*Handover) {
	p.Register(ctx, hs)
	var ready []*Handover
	for _, h := range hs {
		if h.Err != nil {
			failed = append(failed, h)
		} else {
			ready = append(ready, h)
		}
	}
	if len(ready) == 0 {
		return nil, failed
	}
	now := p.Clock.Now()
	cs := make([]domain.Change, len(ready))
	for i, h := range ready {
		cs[i] = h.assignment(p.Verbs, now)
	}
	res, err := p.Store.CommitEach(ctx, cs)
	for i, h := range ready {
		switch {
		case err != nil:
			h.Err = fmt.Errorf("record assignment: %w", err)
		case res[i].Err != nil:
			h.Err = fmt.Errorf("record assignment: %w", res[i].Err)
		default:
			h.Inst, h.Job = res[i].Instances[0], res[i].Jobs[0]
			ok = append(ok, h)
			continue
		}
		failed = append(failed, h)
	}
	if p.Notify != nil {
		for _, h := range ok {
			p.Notify(h.Inst.CloudID)
		}
	}
	return ok, failed
}

// assignment is the change that assigns h's job to its instance, recording
// the runner it is served with when that is not the job's own.
func (h *Handover) assignment(verbs domain.Lifecycle, now time.Time) domain.Change {
	c := verbs.Assign(h.Inst, h.Job, h.Via, h.Reg, now)
	if h.Runner == "" {
		return c
	}
	runner, spec := h.Runner, h.Spec
	for i, t := range c.Jobs {
		apply := t.Apply
		c.Jobs[i].Apply = func(j *domain.Job) {
			apply(j)
			j.Runner, j.Spec = runner, spec
		}
	}
	return c
}

// Register creates a just-in-time runner for the job of each handover
// without an error and without a runner yet, with the job's own labels so
// that GitHub hands this runner this job. Only Inst.ID is read of the
// instance, for the runner's name: a runner may be registered before its
// machine is launched. A handover whose runner was not registered gets
// Err, wrapping ErrRegistration.
func (p *Pipeline) Register(ctx context.Context, hs []*Handover) {
	n := p.Parallelism
	if n <= 0 {
		n = 16
	}
	var todo []*Handover
	for _, h := range hs {
		if h.Err == nil && h.Reg.RunnerID == 0 {
			todo = append(todo, h)
		}
	}
	clock.Fan(p.Clock, len(todo), n, func(i int) {
		h := todo[i]
		name := domain.RunnerName(h.Inst.ID, h.Job.ID)
		reg, err := p.GitHub.RegisterRunner(ctx, p.Scope(h.Job), name, h.Job.Labels)
		if err != nil {
			h.Err = fmt.Errorf("%w: %w", ErrRegistration, err)
			return
		}
		h.Reg = reg
	})
}

// Undo says what becomes of the instance of a handover that will not serve
// its job: back to Back (ready, or stopped if it never started) until
// Deadline, or, when Terminate is set, terminated for that reason.
type Undo struct {
	Back      domain.State
	Deadline  time.Time
	Terminate string
}

// rollBackAttempts bounds RollBack's reads against concurrent writers.
const rollBackAttempts = 8

// RollBack undoes a handover, in one atomic change: its job, if still
// assigned to the instance, goes back to queued (its queue message is still
// in flight and comes back by itself), and the instance, if still bound to
// the job and not started, goes back or is terminated as undo says. An
// instance or a job that has moved on is left alone. The runner registered
// for the handover is deleted: nobody will run it. It returns the instance
// as written, and whether it was rolled back.
func (p *Pipeline) RollBack(ctx context.Context, h *Handover, undo Undo, reason string) (domain.Instance, bool, error) {
	defer p.dropRunner(ctx, h)
	for range rollBackAttempts {
		c, err := p.rollBackChange(ctx, h, undo, reason)
		if err != nil || c.Empty() {
			return domain.Instance{}, false, err
		}
		done, err := p.Store.Commit(ctx, c)
		if errors.Is(err, domain.ErrConflict) {
			continue
		}
		if err != nil {
			return domain.Instance{}, false, fmt.Errorf("roll back job %d on %s: %w", h.Job.ID, h.Inst.ID, err)
		}
		for k, r := range c.Jobs {
			if r.ID == h.Job.ID {
				h.Job = done.Jobs[k]
			}
		}
		if len(done.Instances) == 1 {
			return done.Instances[0], true, nil
		}
		return domain.Instance{}, false, nil
	}
	return domain.Instance{}, false, fmt.Errorf("roll back job %d on %s: its rows keep changing", h.Job.ID, h.Inst.ID)
}

// rollBackChange reads the handover's rows as they are now and returns the
// change that rolls back what is still the handover's. A job whose instance
// started it is not the pipeline's to roll back.
func (p *Pipeline) rollBackChange(ctx context.Context, h *Handover, undo Undo, reason string) (domain.Change, error) {
	var c domain.Change
	in, err := p.Store.GetInstance(ctx, h.Inst.ID)
	found := err == nil
	if err != nil && !errors.Is(err, domain.ErrNotFound) {
		return c, fmt.Errorf("roll back %s: %w", h.Inst.ID, err)
	}
	bound := found && in.Job == h.Job.Key()
	if bound && in.JobStarted {
		p.Log.Info("instance started its job; not rolling it back", "instance", in.ID, "job", h.Job.ID, "reason", reason)
		return c, nil
	}
	j, err := p.Store.GetJob(ctx, h.Job.ID)
	switch {
	case errors.Is(err, domain.ErrNotFound):
	case err != nil:
		return c, fmt.Errorf("roll back job %d: %w", h.Job.ID, err)
	default:
		h.Job = j
		if j.Status == domain.JobAssigned && j.InstanceID == h.Inst.ID {
			c.Jobs = append(c.Jobs, p.Verbs.UnassignJob(j, reason))
		}
	}
	switch {
	case !bound:
		if found {
			p.Log.Info("instance moved on; not rolling it back", "instance", in.ID, "job", h.Job.ID, "now_job", in.Job, "reason", reason)
		}
	case in.State == domain.StateTerminating || in.State == domain.StateTerminated:
	case undo.Terminate != "":
		c.Instances = append(c.Instances, p.Verbs.Terminate(in, undo.Terminate, p.Clock.Now()))
	case in.State == domain.StateClaimed:
		c.Instances = append(c.Instances, p.Verbs.Unclaim(in, undo.Back, undo.Deadline))
	}
	return c, nil
}

// Discard deletes the runner registered for a handover whose instance will
// never get it (its launch failed): nobody will run it.
func (p *Pipeline) Discard(ctx context.Context, h *Handover) { p.dropRunner(ctx, h) }

// dropRunner deletes the runner registered for a handover that will not run
// it.
func (p *Pipeline) dropRunner(ctx context.Context, h *Handover) {
	reg := h.Reg
	h.Reg = domain.RunnerRegistration{}
	if reg.RunnerID == 0 {
		return
	}
	if err := p.GitHub.DeleteRunner(ctx, p.Scope(h.Job), reg.RunnerID); err != nil && !errors.Is(err, domain.ErrNotFound) {
		p.Log.Warn("remove unused runner registration", "runner", reg.Name, "err", err)
	}
}

// Done says the handover's job has its runner for good: RollBack must no
// longer delete it.
func (h *Handover) Done() { h.Reg = domain.RunnerRegistration{} }
