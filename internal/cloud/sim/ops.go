package sim

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// verdict is what a state change does to a machine in a given state.
type verdict int

const (
	refuse verdict = iota // IncorrectInstanceState: the whole call fails
	change                // the machine changes state
	skip                  // already there or on its way: succeed, do nothing
)

// EC2's rules for each batch state change, by the machine's current state.
// A state missing from a table is refused.
var (
	startRules = map[domain.CloudState]verdict{
		domain.CloudStopped: change,
		domain.CloudPending: skip,
		domain.CloudRunning: skip,
	}
	stopRules = map[domain.CloudState]verdict{
		domain.CloudRunning:  change,
		domain.CloudStopping: skip,
		domain.CloudStopped:  skip,
	}
	terminateRules = map[domain.CloudState]verdict{
		domain.CloudPending:      change,
		domain.CloudRunning:      change,
		domain.CloudStopping:     change,
		domain.CloudStopped:      change,
		domain.CloudShuttingDown: skip,
		domain.CloudTerminated:   skip,
	}
)

// Start starts stopped machines; pending and running ones are left as they
// are. The machine is pending for Latency.Start, then running, and its agent
// warms up again.
func (c *Cloud) Start(ctx context.Context, ids []string) error {
	return c.batch(ctx, OpStartInstances, ids, startRules, func(m *machine, now time.Time) {
		runningAt := now.Add(c.opts.Latency.Start)
		m.inst.LaunchedAt = now // EC2 reports the last start as the launch time
		m.begin(now, domain.CloudPending, domain.CloudRunning, c.opts.Latency.Start)
		c.startRun(m, now, runningAt)
	})
}

// Stop stops running machines; stopping and stopped ones are left as they
// are. Pending machines cannot be stopped (as on EC2).
func (c *Cloud) Stop(ctx context.Context, ids []string) error {
	return c.batch(ctx, OpStopInstances, ids, stopRules, func(m *machine, now time.Time) {
		c.endRun(m, now)
		m.begin(now, domain.CloudStopping, domain.CloudStopped, c.opts.Latency.Stop)
	})
}

// Terminate terminates machines in any state; terminating them again is a
// no-op.
func (c *Cloud) Terminate(ctx context.Context, ids []string) error {
	return c.batch(ctx, OpTerminateInstances, ids, terminateRules, func(m *machine, now time.Time) {
		c.endRun(m, now)
		m.begin(now, domain.CloudShuttingDown, domain.CloudTerminated, c.opts.Latency.Terminate)
	})
}

// batch runs a state change over ids with EC2's all-or-nothing semantics:
// if any id is unknown or in a state the rules refuse, nothing changes.
func (c *Cloud) batch(ctx context.Context, op string, ids []string,
	rules map[domain.CloudState]verdict, apply func(*machine, time.Time)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now, err := c.call(ctx, op, len(ids))
	if err != nil {
		return err
	}
	ms, err := c.lookup(op, ids)
	if err != nil {
		return err
	}
	todo := make([]*machine, 0, len(ms))
	for _, m := range ms {
		switch rules[m.inst.State] {
		case change:
			todo = append(todo, m)
		case refuse:
			return apiError(op, CodeIncorrectState, domain.ErrInvalidRequest,
				"instance %s is %s", m.inst.ID, m.inst.State)
		}
	}
	for _, m := range todo {
		apply(m, now)
	}
	return nil
}

// Tag adds tags to machines, overwriting values of keys they already have.
func (c *Cloud) Tag(ctx context.Context, ids []string, tags map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.call(ctx, OpCreateTags, len(ids)); err != nil {
		return err
	}
	if len(tags) == 0 {
		return apiError(OpCreateTags, CodeMissingParameter, domain.ErrInvalidRequest, "no tags given")
	}
	ms, err := c.lookup(OpCreateTags, ids)
	if err != nil {
		return err
	}
	for _, m := range ms {
		maps.Copy(m.inst.Tags, tags)
	}
	return nil
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
	var ms []*machine
	if len(f.IDs) > 0 {
		if ms, err = c.lookup(OpDescribeInstances, f.IDs); err != nil {
			return nil, err
		}
		slices.SortFunc(ms, func(a, b *machine) int { return a.seq - b.seq })
	} else {
		for _, m := range c.sorted() {
			if m.inst.State != domain.CloudTerminated {
				ms = append(ms, m)
			}
		}
	}
	var out []domain.CloudInstance
	for _, m := range ms {
		if hasTags(m.inst.Tags, f.Tags) {
			out = append(out, m.view(now))
		}
	}
	return out, nil
}

// lookup resolves the ids of one call, each once, or fails the call when
// there are none, too many, or unknown ones. Called under c.mu after call,
// which has settled every machine.
func (c *Cloud) lookup(op string, ids []string) ([]*machine, error) {
	if len(ids) == 0 {
		return nil, apiError(op, CodeMissingParameter, domain.ErrInvalidRequest, "no instance ids given")
	}
	if len(ids) > c.opts.MaxPerCall {
		return nil, apiError(op, CodeInvalidParameter, domain.ErrInvalidRequest,
			"%d instance ids, at most %d per call", len(ids), c.opts.MaxPerCall)
	}
	ms := make([]*machine, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	var unknown []string
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if m, ok := c.machines[id]; ok {
			ms = append(ms, m)
		} else {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return nil, apiError(op, CodeNotFound, domain.ErrUnknownInstance,
			"the instance ids %s do not exist", strings.Join(unknown, ", "))
	}
	return ms, nil
}

func hasTags(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}
