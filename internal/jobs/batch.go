package jobs

import (
	"context"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// BatchOptions shape one batched receive.
type BatchOptions struct {
	Max        int
	Visibility time.Duration
	Wait       time.Duration // long poll when empty; negative: none (tests)
	// Linger: when a receive brings more than one message but not a full
	// batch, a burst is arriving. The batch is topped up, Linger apart,
	// while each top-up still brings messages, for at most LingerMax in
	// all, so that a burst is served in a few large batches (one tag call,
	// starts of 50) rather than many small ones. A lone message never
	// waits. Zero or negative: no linger.
	Linger    time.Duration
	LingerMax time.Duration // default 5 × Linger
}

// ReceiveBatch receives up to Max messages from queue as BatchOptions says.
func ReceiveBatch(ctx context.Context, q domain.Queue, clk domain.Clock, queue string, o BatchOptions) ([]domain.Message, error) {
	msgs, err := q.Receive(ctx, queue, o.Max, o.Visibility, max(o.Wait, 0))
	if err != nil || len(msgs) < 2 || o.Linger <= 0 || o.Wait < 0 {
		return msgs, err
	}
	budget := o.LingerMax
	if budget <= 0 {
		budget = 5 * o.Linger
	}
	for waited := time.Duration(0); len(msgs) < o.Max && waited < budget; waited += o.Linger {
		select {
		case <-ctx.Done():
			return msgs, nil
		case <-clk.After(o.Linger):
		}
		more, err := q.Receive(ctx, queue, o.Max-len(msgs), o.Visibility, 0)
		if err != nil || len(more) == 0 {
			break // serve what we have; anything else comes next cycle
		}
		msgs = append(msgs, more...)
	}
	return msgs, nil
}

// Receipts are the receipts of msgs, in order.
func Receipts(msgs []domain.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Receipt
	}
	return out
}
