package dynamodb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// DynamoDB throttles some work inside an answer that succeeds: a batch
// comes back with items unprocessed, a transaction is cancelled for
// throughput. The SDK's retryer sees neither, so the store retries that
// work itself, backing off exponentially with jitter as DynamoDB asks:
// from throttleBase, doubling to throttleCap, until throttleStalls answers
// in a row have done none of it (about 10 to 20 s of waiting) or the
// context ends.
const (
	throttleBase   = 50 * time.Millisecond
	throttleCap    = 5 * time.Second
	throttleStalls = 10
)

// errStalled: DynamoDB kept throttling the work left.
var errStalled = fmt.Errorf("%d answers in a row did none of it", throttleStalls)

// throttled paces the retries of one piece of work DynamoDB throttled.
type throttled struct {
	s      *Store
	stalls int // answers in a row that did none of the work left
}

// again waits before the work left is sent again, the longer the more
// answers in a row did none of it (progressed: the last answer did some).
// It fails with errStalled once DynamoDB has kept throttling it, or with
// the context's error.
func (t *throttled) again(ctx context.Context, progressed bool) error {
	if progressed {
		t.stalls = 0
	} else if t.stalls++; t.stalls >= throttleStalls {
		return errStalled
	}
	return t.s.sleep(ctx, jittered(min(throttleCap, throttleBase<<t.stalls)))
}

// jittered is a random wait between half of d and d: retries of replicas
// throttled together spread out, and each still backs off.
func jittered(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// sleep waits d, or less if ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
