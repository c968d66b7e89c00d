package intake

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// The deliveries of a batch are held invisible while it is worked on, and
// let go once the step is over: a batch outlasting the visibility timeout
// would otherwise be taken again by another replica.
func TestABatchInHandIsHeldUntilTheStepEnds(t *testing.T) {
	f := newFixture(t, Options{Visibility: 30 * time.Second})
	var queue string
	var held []string
	var visibility time.Duration
	stopped := 0
	f.in.Hold = func(q string, receipts []string, v time.Duration) func() {
		queue, held, visibility = q, receipts, v
		return func() { stopped++ }
	}
	f.deliver(jobEvent{action: "queued", id: 1, runID: 7, labels: poolLabels(7)})
	f.deliver(jobEvent{action: "queued", id: 2, runID: 7, labels: poolLabels(7)})
	if n := f.step(); n != 2 {
		t.Fatalf("step handled %d deliveries, want 2", n)
	}
	if queue != domain.QueueInbox || len(held) != 2 || visibility != 30*time.Second {
		t.Fatalf("held %d receipts of %q for %s, want the batch's 2 of the inbox for 30s", len(held), queue, visibility)
	}
	if stopped != 1 {
		t.Fatalf("hold stopped %d times, want once, at the step's end", stopped)
	}
}
