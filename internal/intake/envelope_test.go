package intake

import (
	"fmt"
	"slices"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/webhook"
)

// enqueue puts e in the inbox as the webhook handler does now: through
// webhook.Enqueue, its payload compacted to the fields bullpen reads.
// deliver writes GitHub's whole payload, as envelopes written before did.
func (f *fixture) enqueue(e jobEvent) {
	f.T.Helper()
	f.seq++
	if err := webhook.Enqueue(f.Ctx, f.Queue, f.Clock.Now(), fmt.Sprintf("delivery-%d", f.seq), f.payload(e)); err != nil {
		f.T.Fatal(err)
	}
}

// Deliveries still in the inbox with GitHub's whole payload and those
// stored compacted are read alike.
func TestWholeAndCompactedDeliveriesAreReadAlike(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.enqueue(jobEvent{action: "queued", id: 14_001, runID: 161, labels: poolLabels(161)})
	f.deliver(jobEvent{action: "queued", id: 14_002, runID: 162, labels: poolLabels(162)})
	f.step()
	compacted, whole := f.Job(14_001), f.Job(14_002)
	compacted.ID, compacted.RunID, compacted.Labels = whole.ID, whole.RunID, whole.Labels
	if fmt.Sprintf("%+v", compacted) != fmt.Sprintf("%+v", whole) {
		t.Fatalf("compacted delivery recorded\n%+v\nthe whole one\n%+v", compacted, whole)
	}
	f.deliver(jobEvent{action: "completed", id: 14_001, runID: 161, labels: poolLabels(161), conclusion: "success"})
	f.enqueue(jobEvent{action: "completed", id: 14_002, runID: 162, labels: poolLabels(162), conclusion: "failure"})
	f.step()
	f.inboxEmpty()
	if got := f.fin.recorded(); !slices.Equal(got, []finishCall{{14_001, "success"}, {14_002, "failure"}}) {
		t.Fatalf("Finish calls %v", got)
	}
}
