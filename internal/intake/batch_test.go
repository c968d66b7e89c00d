package intake

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// N queued events cost one store write and one send per queue.
func TestBatchRecordsOnceAndSendsOncePerQueue(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	var pool, launch []int64
	for i := range int64(40) {
		id, run := 10_000+i, 500+i
		labels := poolLabels(run)
		if i%4 == 0 {
			labels = launchLabels(run)
			launch = append(launch, id)
		} else {
			pool = append(pool, id)
		}
		f.deliver(jobEvent{action: "queued", id: id, runID: run, labels: labels})
	}
	if n := f.step(); n != 40 {
		t.Fatalf("step handled %d, want 40", n)
	}
	if got := f.writes.createCall; !slices.Equal(got, []int{40}) {
		t.Errorf("CreateJobs calls (jobs each) %v, want one call of 40", got)
	}
	for q, want := range map[string][]int64{domain.QueuePool: pool, domain.QueueLaunch: launch} {
		if n := f.sends.sent(q); n != 1 {
			t.Errorf("%d sends to the %s queue, want 1", n, q)
		}
		f.wantQueued(q, want...)
	}
	f.inboxEmpty()
}

// BatchMax bounds one Step; the rest waits for the next.
func TestBatchMaxBoundsAStep(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{BatchMax: 3})
	for i := range int64(5) {
		f.deliver(jobEvent{action: "queued", id: 11_000 + i, runID: 600 + i, labels: poolLabels(600 + i)})
	}
	if n := f.step(); n != 3 {
		t.Fatalf("first step handled %d, want 3", n)
	}
	if n := f.step(); n != 2 {
		t.Fatalf("second step handled %d, want 2", n)
	}
	if n := f.step(); n != 0 {
		t.Fatalf("third step handled %d, want 0", n)
	}
	if got := f.writes.createCall; !slices.Equal(got, []int{3, 2}) {
		t.Errorf("CreateJobs calls %v, want [3 2]", got)
	}
}

// deliverMixedBatch records jobs 12001 and 12002 and assigns them, then
// puts in the inbox one delivery of every kind, the last an envelope that
// does not decode; the Finisher fails job 12099.
func (f *fixture) deliverMixedBatch() {
	f.T.Helper()
	f.deliver(jobEvent{action: "queued", id: 12_001, runID: 121, labels: poolLabels(121)})
	f.deliver(jobEvent{action: "queued", id: 12_002, runID: 122, labels: poolLabels(122)})
	f.step()
	f.instance("i-7", domain.StateClaimed, 12_001)
	f.setJob(12_001, func(j *domain.Job) { j.Status, j.InstanceID = domain.JobAssigned, "i-7" })
	f.setJob(12_002, func(j *domain.Job) { j.Status, j.InstanceID = domain.JobAssigned, "i-8" })
	f.fin.failJob(12_099, errors.New("release failed"))

	f.deliver(jobEvent{action: "queued", id: 12_010, runID: 131, labels: poolLabels(131)})
	f.deliver(jobEvent{action: "queued", id: 12_011, runID: 132, labels: launchLabels(132)})
	f.deliver(jobEvent{action: "queued", id: 12_012, runID: 133, labels: []string{"ubuntu-latest"}})
	f.deliver(jobEvent{action: "queued", id: 12_013, runID: 134, labels: []string{"runs-on=134/pool=gpu"}})
	f.deliver(jobEvent{action: "queued", id: 12_010, runID: 131, labels: poolLabels(131)}) // redelivery
	f.deliver(jobEvent{action: "waiting", id: 12_014, runID: 135, labels: poolLabels(135)})
	f.deliver(jobEvent{action: "queued", id: 12_001, runID: 121, labels: poolLabels(121)}) // late, already assigned
	f.deliver(jobEvent{action: "in_progress", id: 12_001, runID: 121, labels: poolLabels(121), runnerName: "bp-i-7"})
	f.deliver(jobEvent{action: "completed", id: 12_002, runID: 122, labels: poolLabels(122), conclusion: "success"})
	f.deliver(jobEvent{action: "completed", id: 12_099, runID: 199, labels: poolLabels(199), conclusion: "failure"})
	f.sendRaw([]byte(`{"not":"an envelope"}`), "")
}

// One batch holding every kind of delivery: each has its effect, and only
// the failing one stays in the inbox.
func TestMixedBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second})
	f.deliverMixedBatch()
	if n, err := f.in.Step(f.Ctx); n != 11 || err == nil {
		t.Fatalf("step handled %d (err %v), want 11 and the Finisher's error", n, err)
	}

	checks := []struct {
		id     int64
		status domain.JobStatus
		reason string
	}{
		{12_010, domain.JobQueued, ""},
		{12_011, domain.JobQueued, ""},
		{12_013, domain.JobRejected, `pool "gpu" is not configured for environment "production" (pools: small-x64)`},
		{12_014, domain.JobQueued, ReasonWaiting},
		{12_001, domain.JobRunning, ""},
		{12_002, domain.JobAssigned, ""},  // the recording Finisher does not complete it
		{12_099, domain.JobCompleted, ""}, // its completion came first
	}
	for _, c := range checks {
		if j := f.Job(c.id); j.Status != c.status || j.Reason != c.reason {
			t.Errorf("job %d: %s %q, want %s %q", c.id, j.Status, j.Reason, c.status, c.reason)
		}
	}
	f.noJob(12_012)
	if !f.Instance("i-7").JobStarted {
		t.Error("instance i-7 not marked job-started")
	}
	// The set-up's step wrote 2 jobs; the batch's 6 arrivals (the
	// not-ours one aside) take one more write and one send per queue, and
	// the completion of a job never seen queued one more.
	if got := f.writes.createCall; !slices.Equal(got, []int{2, 6, 1}) {
		t.Errorf("CreateJobs calls (jobs each) %v, want [2 6 1]", got)
	}
	if p, l := f.sends.sent(domain.QueuePool), f.sends.sent(domain.QueueLaunch); p != 2 || l != 1 {
		t.Errorf("sends to pool %d, launch %d; want 2 (one per step) and 1", p, l)
	}
	// 12_001 and 12_002 were received from the pool queue by no one: they
	// are still there from the first step; the batch added only 12_010.
	f.wantQueued(domain.QueuePool, 12_001, 12_002, 12_010)
	f.wantQueued(domain.QueueLaunch, 12_011)
	if got := f.fin.recorded(); !slices.Equal(got, []finishCall{{12_002, "success"}, {12_099, "failure"}}) {
		t.Errorf("Finish calls %v", got)
	}
	// The rejected job's run is the reaper's to cancel, after a grace.
	if got := f.gh.cancelled(); len(got) != 0 {
		t.Errorf("CancelRun calls %v, want none", got)
	}
	if dl := f.deadLetters(); len(dl) != 1 || string(dl[0]) != `{"not":"an envelope"}` {
		t.Errorf("dead letters %q", dl)
	}
	if s := f.Stats(domain.QueueInbox); s.InFlight != 1 || s.Visible != 0 {
		t.Errorf("inbox %+v, want only the failed completion kept", s)
	}
}
