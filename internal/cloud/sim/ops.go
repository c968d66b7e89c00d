package sim

import (
	"context"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Start starts stopped machines; pending and running ones are left as they
// are. The machine is pending for Latency.Start, then running, and its agent
// warms up again.
func (c *Cloud) Start(ctx context.Context, ids []string) error {
	return c.batch(ctx, OpStartInstances, ids, ec2like.StartRules, func(m *machine, now time.Time) {
		runningAt := now.Add(c.opts.latency(m.inst.InstanceType).Start)
		m.inst.LaunchedAt = now // EC2 reports the last start as the launch time
		m.begin(now, domain.CloudPending, domain.CloudRunning, c.opts.latency(m.inst.InstanceType).Start)
		c.startRun(m, now, runningAt)
	})
}

// Stop stops running machines; stopping and stopped ones are left as they
// are. Pending machines cannot be stopped (as on EC2).
func (c *Cloud) Stop(ctx context.Context, ids []string) error {
	return c.batch(ctx, OpStopInstances, ids, ec2like.StopRules, func(m *machine, now time.Time) {
		c.endRun(m, now)
		m.begin(now, domain.CloudStopping, domain.CloudStopped, c.opts.latency(m.inst.InstanceType).Stop)
	})
}

// Terminate terminates machines in any state; terminating them again is a
// no-op. A machine protected from termination (Protect) is refused, as on
// EC2 (OperationNotPermitted).
func (c *Cloud) Terminate(ctx context.Context, ids []string) error {
	return c.batch(ctx, OpTerminateInstances, ids, ec2like.TerminateRules, func(m *machine, now time.Time) {
		c.endRun(m, now)
		m.begin(now, domain.CloudShuttingDown, domain.CloudTerminated, c.opts.latency(m.inst.InstanceType).Terminate)
	})
}

// batch runs a state change over ids as bullpen's EC2 provider makes it:
// each call as EC2 makes it (see ec2like.Batch), and a machine a call is
// refused over taken out and the call made again on the others
// (ec2like.SkipRefused).
func (c *Cloud) batch(ctx context.Context, op string, ids []string,
	rules ec2like.Rules, apply func(*machine, time.Time)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	lookup := c.lookup
	if op == OpTerminateInstances {
		lookup = c.lookupTerminable
	}
	return ec2like.SkipRefused(op, ids, c.lookup, func(ids []string) error {
		return ec2like.Batch(ctx, op, ids, c.call, lookup, rules, apply)
	})
}

// lookupTerminable resolves the ids of a terminate call, which EC2 refuses
// whole over a machine protected from termination that is not terminated
// yet. Called under c.mu.
func (c *Cloud) lookupTerminable(op string, ids []string) ([]*machine, error) {
	ms, err := c.lookup(op, ids)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.protected && m.inst.State != domain.CloudTerminated && m.inst.State != domain.CloudShuttingDown {
			return nil, ec2like.Refusal(op, CodeNotPermitted, nil, m.inst.ID,
				"The instance '%s' may not be terminated. Modify its 'disableApiTermination' instance attribute and try again.", m.inst.ID)
		}
	}
	return ms, nil
}

// Protect turns termination protection on or off for a machine, as EC2's
// disableApiTermination attribute does: a protected machine is refused by
// Terminate until it is turned off. It reports false for an id the cloud
// does not know.
func (c *Cloud) Protect(id string, on bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.machines[id]
	if ok {
		m.protected = on
	}
	return ok
}

// Tag adds tags to machines, overwriting values of keys they already have.
func (c *Cloud) Tag(ctx context.Context, ids []string, tags map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := ec2like.Tag(ctx, ids, tags, c.call, c.lookup)
	return err
}

// List describes machines. With IDs, exactly those (terminated ones
// included; an unknown id fails the call); without, every machine not
// terminated. Tags must all match exactly. Results are in creation order.
func (c *Cloud) List(ctx context.Context, f domain.CloudFilter) ([]domain.CloudInstance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now, err := c.call(ctx, OpDescribeInstances, len(f.IDs))
	if err != nil {
		return nil, err
	}
	return ec2like.Describe(f, c.machines, c.lookup, c.viewAt(now))
}

// lookup resolves the ids of one call (see ec2like.Resolve). Called under
// c.mu after call, which has settled every machine.
func (c *Cloud) lookup(op string, ids []string) ([]*machine, error) {
	return ec2like.Resolve(op, ids, c.opts.MaxPerCall, func(id string) (*machine, bool) {
		m, ok := c.machines[id]
		return m, ok
	})
}

// viewAt describes machines as they are at now.
func (c *Cloud) viewAt(now time.Time) func(*machine) domain.CloudInstance {
	return func(m *machine) domain.CloudInstance { return m.view(now) }
}
