package sim

import (
	"context"
	"errors"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// EC2 error codes the sim returns.
const (
	CodeIncorrectState     = ec2like.CodeIncorrectState
	CodeNotPermitted       = "OperationNotPermitted"
	CodeNotFound           = ec2like.CodeNotFound
	CodeAMINotFound        = ec2like.CodeAMINotFound
	CodeAMIMalformed       = ec2like.CodeAMIMalformed
	CodeInsufficient       = ec2like.CodeInsufficient
	CodeThrottled          = ec2like.CodeThrottled
	CodeInvalidParameter   = ec2like.CodeInvalidParameter
	CodeMissingParameter   = ec2like.CodeMissingParameter
	CodeIdempotentMismatch = ec2like.CodeIdempotentMismatch
	CodeInternal           = ec2like.CodeInternal
)

// failure is an injected error for the next n calls of one operation.
type failure struct {
	n   int
	err error
}

// bucket is a token bucket on the injected clock.
type bucket struct {
	rate   float64 // tokens per second
	burst  float64
	tokens float64
	last   time.Time
}

func (b *bucket) take(now time.Time) bool {
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = min(b.burst, b.tokens+elapsed*b.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// FailNext makes the next n calls of op fail with err, wrapped in a
// *domain.CloudError whose Code follows the sentinel err wraps (a
// *domain.CloudError is returned as it is, with Op set). A nil err is an
// InternalError. n <= 0 clears the injection. Throttled calls do not use up
// the n.
func (c *Cloud) FailNext(op string, n int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n <= 0 {
		delete(c.failures, op)
		return
	}
	c.failures[op] = &failure{n: n, err: injected(op, err)}
}

// Throttle limits op to perSecond calls on average with bursts of burst,
// measured on the injected clock; calls beyond it fail with
// domain.ErrThrottled (RequestLimitExceeded). The bucket starts full.
// burst <= 0 removes the limit.
func (c *Cloud) Throttle(op string, perSecond float64, burst int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if burst <= 0 {
		delete(c.throttles, op)
		return
	}
	c.throttles[op] = &bucket{
		rate:   max(perSecond, 0),
		burst:  float64(burst),
		tokens: float64(burst),
		last:   c.clk.Now(),
	}
}

// SetCapacity changes the cap on live machines; zero means unlimited.
// Machines already running beyond a lowered cap are left alone.
func (c *Cloud) SetCapacity(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.capacity = max(n, 0)
}

// NeverWarm makes the machine's built-in agent never send its warm signal
// again (with Options.Lifecycle it changes nothing: the agents outside the
// sim have their own faults). It reports false for an id the cloud does not
// know.
func (c *Cloud) NeverWarm(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.machines[id]
	if ok {
		m.neverWarm = true
		m.run.stopTimer()
	}
	return ok
}

// call does what every API call does before its own work: count it, then
// apply the injected throttle and failures. Called under c.mu; it returns
// the time the call happens at.
func (c *Cloud) call(ctx context.Context, op string, n int) (time.Time, error) {
	if err := c.calls.Begin(ctx, op, n); err != nil {
		return time.Time{}, err
	}
	now := c.clk.Now()
	if b := c.throttles[op]; b != nil && !b.take(now) {
		return now, ec2like.Errorf(op, CodeThrottled, domain.ErrThrottled, "rate exceeded")
	}
	if f := c.failures[op]; f != nil {
		if f.n--; f.n <= 0 {
			delete(c.failures, op)
		}
		return now, f.err
	}
	c.purge(now)
	return now, nil
}

// injected wraps an error given to FailNext.
func injected(op string, err error) *domain.CloudError {
	var ce *domain.CloudError
	if errors.As(err, &ce) {
		cp := *ce
		cp.Op = op
		return &cp
	}
	if err == nil {
		err = errors.New("injected failure")
	}
	return &domain.CloudError{Op: op, Code: codeFor(err), Err: err}
}

// codeFor names the EC2 code that goes with a sentinel error.
func codeFor(err error) string {
	switch {
	case errors.Is(err, domain.ErrThrottled):
		return CodeThrottled
	case errors.Is(err, domain.ErrInsufficientCapacity):
		return CodeInsufficient
	case errors.Is(err, domain.ErrUnknownInstance):
		return CodeNotFound
	case errors.Is(err, domain.ErrUnknownImage):
		return CodeAMINotFound
	case errors.Is(err, domain.ErrInvalidRequest):
		return CodeInvalidParameter
	}
	return CodeInternal
}
