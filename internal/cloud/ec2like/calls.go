package ec2like

import (
	"context"
	"fmt"
	"maps"
)

// Calls counts API calls by operation, so that tests can assert how
// bullpen batches its calls. The zero value is ready to use.
type Calls struct {
	counts map[string]int
	maxIDs map[string]int
}

// Begin does what every API call does first: it fails when ctx is done
// (not counted, as the call never reaches the cloud), and otherwise counts
// the call and the n ids (or machines) it carries, whatever becomes of it.
func (c *Calls) Begin(ctx context.Context, op string, n int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if c.counts == nil {
		c.Reset()
	}
	c.counts[op]++
	c.maxIDs[op] = max(c.maxIDs[op], n)
	return nil
}

// Counts returns how many times each operation was called.
func (c *Calls) Counts() map[string]int { return copyCounts(c.counts) }

// MaxIDs returns, per operation, the most ids one call carried.
func (c *Calls) MaxIDs() map[string]int { return copyCounts(c.maxIDs) }

// Reset forgets every call.
func (c *Calls) Reset() {
	c.counts = map[string]int{}
	c.maxIDs = map[string]int{}
}

// copyCounts returns a map of the caller's own, never nil.
func copyCounts(in map[string]int) map[string]int {
	out := make(map[string]int, len(in))
	maps.Copy(out, in)
	return out
}
