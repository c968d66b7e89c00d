package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// EC2 error codes the local cloud returns, as the simulated cloud does.
const (
	CodeIncorrectState     = "IncorrectInstanceState"
	CodeNotFound           = "InvalidInstanceID.NotFound"
	CodeAMINotFound        = "InvalidAMIID.NotFound"
	CodeAMIMalformed       = "InvalidAMIID.Malformed"
	CodeInsufficient       = "InsufficientInstanceCapacity"
	CodeInvalidParameter   = "InvalidParameterValue"
	CodeMissingParameter   = "MissingParameter"
	CodeIdempotentMismatch = "IdempotentParameterMismatch"
	CodeInternal           = "InternalError"
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
	now, err := c.call(ctx, OpCreateFleet)
	if err != nil {
		return nil, err
	}
	if c.closed {
		return nil, &domain.CloudError{Op: OpCreateFleet, Code: CodeInternal, Err: ErrClosed}
	}
	fp := fingerprint(spec)
	if rec, ok := c.tokens[spec.ClientToken]; ok && spec.ClientToken != "" {
		if rec.fingerprint != fp {
			return nil, apiError(OpCreateFleet, CodeIdempotentMismatch, domain.ErrInvalidRequest,
				"client token %q was used with a different request", spec.ClientToken)
		}
		return c.views(rec.ids), rec.err
	}
	if err := validateLaunch(spec); err != nil {
		return nil, err
	}
	n := spec.Count
	if c.opts.Capacity > 0 {
		n = min(n, max(0, c.opts.Capacity-c.live()))
	}
	ms, err := c.launch(spec, n, now)
	if err != nil {
		return nil, &domain.CloudError{Op: OpCreateFleet, Code: CodeInternal, Err: err}
	}
	if n < spec.Count {
		err = apiError(OpCreateFleet, CodeInsufficient, domain.ErrInsufficientCapacity,
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
	if spec.ClientToken != "" {
		c.tokens[spec.ClientToken] = tokenRecord{fingerprint: fp, ids: ids, err: err}
	}
	return out, err
}

func validateLaunch(spec domain.LaunchSpec) error {
	if spec.Count < 1 || spec.Count > MaxPerCall {
		return apiError(OpCreateFleet, CodeInvalidParameter, domain.ErrInvalidRequest,
			"count %d, want 1 to %d", spec.Count, MaxPerCall)
	}
	if spec.ImageID == "" {
		return apiError(OpCreateFleet, CodeAMIMalformed, domain.ErrUnknownImage, "no image id given")
	}
	if _, err := renderEnv(spec.Agent, nil); err != nil {
		return apiError(OpCreateFleet, CodeInvalidParameter, domain.ErrInvalidRequest, "%v", err)
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

// views describes the machines with ids that still exist. Called under c.mu.
func (c *Cloud) views(ids []string) []domain.CloudInstance {
	out := make([]domain.CloudInstance, 0, len(ids))
	for _, id := range ids {
		if m, ok := c.machines[id]; ok {
			out = append(out, m.view())
		}
	}
	return out
}

// fingerprint identifies a Create request for ClientToken checks.
func fingerprint(spec domain.LaunchSpec) string {
	b, err := json.Marshal(struct {
		Count  int
		Image  string
		Tags   map[string]string
		Launch string
	}{spec.Count, spec.ImageID, spec.Tags, spec.Agent.LaunchID})
	if err != nil {
		panic("fingerprint: " + err.Error()) // plain structs always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Start runs stopped machines again, each a new process from the same
// directory and env file; pending and running ones are left as they are.
// A process that cannot be started leaves its machine stopped and fails
// the call (InternalError) after the others have started.
func (c *Cloud) Start(ctx context.Context, ids []string) error {
	var failed []error
	err := c.batch(ctx, OpStartInstances, ids, startRules, func(m *machine, now time.Time) {
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
		return &domain.CloudError{Op: OpStartInstances, Code: CodeInternal, Err: errors.Join(failed...)}
	}
	return nil
}

// Stop halts running machines' processes; stopping and stopped machines
// are left as they are. A machine is stopping until its process group is
// gone, then stopped.
func (c *Cloud) Stop(ctx context.Context, ids []string) error {
	return c.batch(ctx, OpStopInstances, ids, stopRules, func(m *machine, _ time.Time) {
		m.inst.State = domain.CloudStopping
		c.halt(m, m.proc)
		_ = c.save(m)
	})
}

// Terminate halts machines in any state and removes their directories;
// terminating them again is a no-op.
func (c *Cloud) Terminate(ctx context.Context, ids []string) error {
	return c.batch(ctx, OpTerminateInstances, ids, terminateRules, func(m *machine, _ time.Time) {
		c.terminate(m)
	})
}

// batch runs a state change over ids with EC2's all-or-nothing semantics:
// if any id is unknown or in a state the rules refuse, nothing changes.
func (c *Cloud) batch(ctx context.Context, op string, ids []string,
	rules map[domain.CloudState]verdict, apply func(*machine, time.Time)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now, err := c.call(ctx, op)
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
	if _, err := c.call(ctx, OpCreateTags); err != nil {
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
		_ = c.save(m)
	}
	return nil
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
	if _, err := c.call(ctx, OpDescribeInstances); err != nil {
		return nil, err
	}
	var ms []*machine
	if len(f.IDs) > 0 {
		var err error
		if ms, err = c.lookup(OpDescribeInstances, f.IDs); err != nil {
			return nil, err
		}
		slices.SortFunc(ms, func(a, b *machine) int { return a.seq - b.seq })
	} else {
		c.discover()
		for _, m := range c.sorted() {
			if m.inst.State != domain.CloudTerminated {
				ms = append(ms, m)
			}
		}
	}
	var out []domain.CloudInstance
	for _, m := range ms {
		if hasTags(m.inst.Tags, f.Tags) {
			out = append(out, m.view())
		}
	}
	return out, nil
}

// ResolveImage accepts any non-empty name: a local machine runs the
// Command whatever its image. The id is "local-" and the name.
func (c *Cloud) ResolveImage(ctx context.Context, name string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.call(ctx, OpDescribeImages); err != nil {
		return "", err
	}
	if name == "" {
		return "", apiError(OpDescribeImages, CodeAMINotFound, domain.ErrUnknownImage, "no image name given")
	}
	return "local-" + name, nil
}

// call counts an API call and forgets machines past their retention.
// Called under c.mu.
func (c *Cloud) call(ctx context.Context, op string) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", op, err)
	}
	c.calls[op]++
	now := c.clk.Now()
	c.purge(now)
	return now, nil
}

// lookup resolves the ids of one call, each once, or fails the call when
// there are none, too many, or unknown ones. An id this Cloud does not
// know is looked for in Dir, and adopted when recorded there. Called under
// c.mu.
func (c *Cloud) lookup(op string, ids []string) ([]*machine, error) {
	if len(ids) == 0 {
		return nil, apiError(op, CodeMissingParameter, domain.ErrInvalidRequest, "no instance ids given")
	}
	if len(ids) > MaxPerCall {
		return nil, apiError(op, CodeInvalidParameter, domain.ErrInvalidRequest,
			"%d instance ids, at most %d per call", len(ids), MaxPerCall)
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
		} else if m := c.adoptID(id); m != nil {
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

func apiError(op, code string, sentinel error, format string, args ...any) *domain.CloudError {
	return &domain.CloudError{Op: op, Code: code, Err: fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)}
}
