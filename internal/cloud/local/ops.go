package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launchdata"
)

// Create launches spec.Count machines, each a process started before the
// call returns. When Capacity leaves room for fewer, it launches those that
// fit and returns them with an error wrapping domain.ErrInsufficientCapacity.
// If a process cannot be started, the machines of the call are terminated
// and the error is an InternalError.
//
// A call repeating a non-empty ClientToken that launched machines returns
// those machines (as they are now) and the original error, launching
// nothing; the same token with a different request is refused
// (IdempotentParameterMismatch). A token whose call launched nothing is not
// remembered, so a retry may succeed once capacity frees up.
func (c *Cloud) Create(ctx context.Context, spec domain.LaunchSpec) ([]domain.CloudInstance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now, err := c.call(ctx, ec2like.OpCreateFleet, spec.Count)
	if err != nil {
		return nil, err
	}
	if c.closed {
		return nil, &domain.CloudError{Op: ec2like.OpCreateFleet, Code: ec2like.CodeInternal, Err: ErrClosed}
	}
	fp := ec2like.Fingerprint(spec)
	done, err := c.tokens.Recall(spec.ClientToken, fp)
	if err != nil {
		return nil, err
	}
	if done != nil {
		return ec2like.Views(c.machines, done.IDs, (*machine).view), done.Err
	}
	if err := validateLaunch(spec, c.opts.AgentEnv); err != nil {
		return nil, err
	}
	n := ec2like.Fit(spec.Count, c.opts.Capacity, ec2like.Live(c.machines))
	ms, err := c.launch(spec, n, now)
	if err != nil {
		return nil, &domain.CloudError{Op: ec2like.OpCreateFleet, Code: ec2like.CodeInternal, Err: err}
	}
	if n < spec.Count {
		err = ec2like.Errorf(ec2like.OpCreateFleet, ec2like.CodeInsufficient, domain.ErrInsufficientCapacity,
			"launched %d of %d local machines (capacity %d)", n, spec.Count, c.opts.Capacity)
	}
	if n == 0 {
		return nil, err
	}
	ids := make([]string, len(ms))
	out := make([]domain.CloudInstance, len(ms))
	for i, m := range ms {
		ids[i], out[i] = m.inst.ID, m.view()
	}
	c.tokens.Remember(spec.ClientToken, fp, ids, err)
	return out, err
}

// validateLaunch refuses a launch whose machines' launch data, rendered as
// newMachine renders it, would not be written.
func validateLaunch(spec domain.LaunchSpec, agentEnv map[string]string) error {
	if err := ec2like.CheckLaunch(spec, MaxPerCall); err != nil {
		return err
	}
	if _, err := launchdata.EnvFile(spec.Agent, agentEnv); err != nil {
		return ec2like.Errorf(ec2like.OpCreateFleet, ec2like.CodeInvalidParameter, domain.ErrInvalidRequest, "%v", err)
	}
	return nil
}

// launch prepares and spawns n machines, all or none: on a failure the
// machines spawned so far are terminated. Called under c.mu.
func (c *Cloud) launch(spec domain.LaunchSpec, n int, now time.Time) ([]*machine, error) {
	ms := make([]*machine, 0, n)
	for range n {
		m, err := c.launchOne(spec, now)
		if err != nil {
			for _, done := range ms {
				c.terminate(done)
			}
			return nil, fmt.Errorf("launch %d of %d machines: %w", len(ms)+1, n, err)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// launchOne prepares and spawns one machine, recorded before its process
// starts and again with its pid, so that a crash in between leaves a
// machine a later Cloud adopts rather than a directory nobody owns. A
// machine that fails before its process starts is forgotten; one whose
// process started is terminated. Called under c.mu.
func (c *Cloud) launchOne(spec domain.LaunchSpec, now time.Time) (*machine, error) {
	m, err := c.newMachine(spec, now)
	if err != nil {
		return nil, err
	}
	if err := c.save(m); err != nil {
		_ = os.RemoveAll(m.paths.Dir)
		return nil, err
	}
	c.machines[m.inst.ID] = m
	if err := c.spawn(m); err != nil {
		delete(c.machines, m.inst.ID)
		_ = os.RemoveAll(m.paths.Dir)
		return nil, err
	}
	if err := c.save(m); err != nil {
		c.terminate(m)
		return nil, err
	}
	return m, nil
}

// Start runs stopped machines again, each a new process from the same
// directory and env file; pending and running ones are left as they are.
// A process that cannot be started leaves its machine stopped and fails
// the call (InternalError) after the others have started.
func (c *Cloud) Start(ctx context.Context, ids []string) error {
	var failed []error
	err := c.batch(ctx, ec2like.OpStartInstances, ids, ec2like.StartRules, func(m *machine, now time.Time) {
		if c.closed {
			failed = append(failed, fmt.Errorf("start %s: %w", m.inst.ID, ErrClosed))
			return
		}
		if err := c.spawn(m); err != nil {
			failed = append(failed, err)
			return
		}
		m.inst.LaunchedAt = now // EC2 reports the last start as the launch time
		_ = c.save(m)
	})
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return &domain.CloudError{Op: ec2like.OpStartInstances, Code: ec2like.CodeInternal, Err: errors.Join(failed...)}
	}
	return nil
}

// Stop halts running machines' processes; stopping and stopped machines
// are left as they are. A machine is stopping until its process group is
// gone, then stopped.
func (c *Cloud) Stop(ctx context.Context, ids []string) error {
	return c.batch(ctx, ec2like.OpStopInstances, ids, ec2like.StopRules, func(m *machine, _ time.Time) {
		m.inst.State = domain.CloudStopping
		c.halt(m, m.proc)
		_ = c.save(m)
	})
}

// Terminate halts machines in any state and removes their directories;
// terminating them again is a no-op.
func (c *Cloud) Terminate(ctx context.Context, ids []string) error {
	return c.batch(ctx, ec2like.OpTerminateInstances, ids, ec2like.TerminateRules, func(m *machine, _ time.Time) {
		c.terminate(m)
	})
}

// batch runs a state change over ids as bullpen's EC2 provider makes it
// (see ec2like.Batch): a machine the call is refused over is taken out and
// the call made again on the others (ec2like.SkipRefused).
func (c *Cloud) batch(ctx context.Context, op string, ids []string,
	rules ec2like.Rules, apply func(*machine, time.Time)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ec2like.SkipRefused(op, ids, c.lookup, func(ids []string) error {
		return ec2like.Batch(ctx, op, ids, c.call, c.lookup, rules, apply)
	})
}

// Tag adds tags to machines, overwriting values of keys they already have,
// and records them; unknown ids are skipped, as in batch.
func (c *Cloud) Tag(ctx context.Context, ids []string, tags map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ms, err := ec2like.Tag(ctx, ids, tags, c.call, c.lookup)
	for _, m := range ms {
		_ = c.save(m)
	}
	return err
}

// List describes machines. With IDs, exactly those (terminated ones
// included; an unknown id fails the call); without, every machine not
// terminated. Tags must all match exactly. Results are in creation order,
// adopted machines in the order of their launch times (then ids) after the
// machines known before. Machines recorded in Dir behind the Cloud's back
// are adopted first.
func (c *Cloud) List(ctx context.Context, f domain.CloudFilter) ([]domain.CloudInstance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.call(ctx, ec2like.OpDescribeInstances, len(f.IDs)); err != nil {
		return nil, err
	}
	if len(f.IDs) == 0 {
		c.discover() // naming ids adopts just those, in lookup
	}
	return ec2like.Describe(f, c.machines, c.lookup, (*machine).view)
}

// ResolveImage accepts any non-empty name: a local machine runs the
// Command whatever its image. The id is "local-" and the name.
func (c *Cloud) ResolveImage(ctx context.Context, name string, _ domain.RunnerSpec) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := ec2like.DescribeImage(ctx, c.call, name); err != nil {
		return "", err
	}
	return "local-" + name, nil
}

// call counts an API call and forgets machines past their retention.
// Called under c.mu.
func (c *Cloud) call(ctx context.Context, op string, n int) (time.Time, error) {
	if err := c.calls.Begin(ctx, op, n); err != nil {
		return time.Time{}, err
	}
	if c.detached {
		// The machines are the next Cloud's now: not even a List, which
		// would adopt records.
		return time.Time{}, &domain.CloudError{Op: op, Code: ec2like.CodeInternal, Err: ErrClosed}
	}
	now := c.clk.Now()
	ec2like.Purge(c.machines, c.opts.TerminatedRetention, now)
	return now, nil
}

// lookup resolves the ids of one call (see ec2like.Resolve). An id this
// Cloud does not know is looked for in Dir, and adopted when recorded
// there. Called under c.mu.
func (c *Cloud) lookup(op string, ids []string) ([]*machine, error) {
	return ec2like.Resolve(op, ids, MaxPerCall, func(id string) (*machine, bool) {
		if m, ok := c.machines[id]; ok {
			return m, true
		}
		m := c.adoptID(id)
		return m, m != nil
	})
}
