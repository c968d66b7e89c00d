package intake

import (
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// checkRejectedOnce checks that run's job was rejected exactly once: one
// log line, one count, and its run not cancelled (the reaper cancels it
// after a grace).
func (f *fixture) checkRejectedOnce(id, run int64) {
	f.T.Helper()
	if j := f.Job(id); j.Status != domain.JobRejected {
		f.T.Fatalf("job %d %s, want rejected", id, j.Status)
	}
	if l := f.logs.Lines("level=WARN", `msg="job rejected"`); len(l) != 1 {
		f.T.Errorf("rejection logged %d times, want once: %q", len(l), l)
	}
	f.wantEvents("queued", "rejected", 1)
	if got := f.gh.cancelled(); len(got) != 0 {
		f.T.Errorf("CancelRun calls %v, want none for run %d", got, run)
	}
}

// A batch write that creates some jobs and then fails (DynamoDB puts job by
// job) still rejects the rejected job it created: the retry finds the job
// recorded, not created, and would not reject it.
func TestJobCreatedByAFailedBatchWriteIsRejectedOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second})
	f.writes.setFailures(errors.New("throttled"), nil)
	f.deliver(jobEvent{action: "queued", id: 13_001, runID: 141, labels: []string{"runs-on=141/pool=gpu"}})
	f.deliver(jobEvent{action: "queued", id: 13_002, runID: 142, labels: poolLabels(142)})
	f.stepFails()
	f.checkRejectedOnce(13_001, 141)
	// The writes one by one fail too: both deliveries wait for a retry.
	if s := f.Stats(domain.QueueInbox); s.InFlight != 2 {
		t.Fatalf("inbox %+v, want both deliveries kept", s)
	}

	f.writes.setFailures(nil, nil)
	f.Clock.Advance(30 * time.Second)
	f.step()
	f.inboxEmpty()
	f.checkRejectedOnce(13_001, 141)
	f.wantQueued(domain.QueuePool, 13_002)
	f.wantEvents("queued", "pool", 1)
}

// A redelivery that fails to read its job holds back no rejection of a job
// created by the same write later in the batch.
func TestFailedRedeliveryDoesNotSkipARejection(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second})
	f.deliver(jobEvent{action: "queued", id: 13_101, runID: 151, labels: poolLabels(151)})
	f.step()
	f.writes.setFailures(nil, map[int64]error{13_101: errors.New("read timed out")})
	f.deliver(jobEvent{action: "queued", id: 13_101, runID: 151, labels: poolLabels(151)})
	f.deliver(jobEvent{action: "queued", id: 13_102, runID: 152, labels: []string{"runs-on=152/pool=gpu"}})
	f.stepFails()
	f.checkRejectedOnce(13_102, 152)

	f.writes.setFailures(nil, nil)
	f.Clock.Advance(30 * time.Second)
	f.step()
	f.inboxEmpty()
	f.checkRejectedOnce(13_102, 152)
}
