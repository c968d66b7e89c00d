package intake

import (
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

// resend runs the reaper's sweep of jobs whose message is pending, a
// reaper interval later, and returns how many it sent.
func (f *fixture) resend() int {
	f.T.Helper()
	f.Clock.Advance(time.Minute)
	n, err := jobs.SendPending(f.Ctx, f.Store, f.Queue, f.Clock.Now(), time.Minute)
	if err != nil {
		f.T.Fatal(err)
	}
	f.Clock.Advance(jobs.MaxRequeueDelay) // past the message's delay
	return n
}

// A job recorded by a delivery whose send to its queue fails every time
// is not left behind when the delivery is dead-lettered: no other message
// would ever come for it (the reaper admits only jobs the store does not
// know), so it is left to the reaper's sweep, which sends it.
func TestDeadLetteredArrivalLeavesItsRecordedJobToTheReaper(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second, MaxReceives: 3})
	f.sends.failSends(domain.QueuePool, errors.New("queue unavailable"))
	body := f.deliver(jobEvent{action: "queued", id: 9401, runID: 941, labels: poolLabels(941)})
	f.failingRounds(3)
	f.deadLettered(body)
	if j := f.Job(9401); j.Status != domain.JobQueued || !j.SendPending {
		t.Fatalf("job %s, send pending %v; want queued with its message pending", j.Status, j.SendPending)
	}
	f.wantEvents("queued", "send_pending", 1)
	if l := f.logs.Lines("level=ERROR", "dead-lettered", "job=9401", "job_send_pending=true"); len(l) != 1 {
		t.Errorf("want one ERROR saying the job's message is pending, got %q", f.logs.Lines("level=ERROR"))
	}

	f.sends.failSends(domain.QueuePool, nil)
	if n := f.resend(); n != 1 {
		t.Fatalf("the reaper's sweep sent %d jobs, want 1", n)
	}
	f.wantQueued(domain.QueuePool, 9401)
	if j := f.Job(9401); j.SendPending {
		t.Error("send pending still set once the message is out")
	}
}

// A queued delivery that could not release its job from waiting for an
// approval releases it as it is dead-lettered: the job would otherwise
// wait for an approval given long ago.
func TestDeadLetteredQueuedDeliveryReleasesItsWaitingJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second, MaxReceives: 2})
	f.deliver(jobEvent{action: "waiting", id: 9402, runID: 942, labels: launchLabels(942)})
	f.step()
	f.writes.failTransitions = map[int64]int{9402: 2} // both receives' release
	body := f.deliver(jobEvent{action: "queued", id: 9402, runID: 942, labels: launchLabels(942)})
	f.failingRounds(2)
	f.deadLettered(body)
	if j := f.Job(9402); j.Reason != "" || !j.SendPending {
		t.Fatalf("job reason %q, send pending %v; want released with its message pending", j.Reason, j.SendPending)
	}
	if n := f.resend(); n != 1 {
		t.Fatalf("the reaper's sweep sent %d jobs, want 1", n)
	}
	f.wantQueued(domain.QueueLaunch, 9402)
}

// A job recorded on a try whose success the store did not report (a
// timeout after the write) is found by the hand-off, whatever failed
// after it: the store refusing every later write is as good as a failed
// send.
func TestDeadLetteredArrivalWhoseStoreKeepsFailingAfterRecording(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second, MaxReceives: 2})
	body := f.deliver(jobEvent{action: "queued", id: 9404, runID: 944, labels: poolLabels(944)})
	var recorded bool
	f.writes.failCreate = func(batch []domain.Job) error {
		if !recorded {
			recorded = true
			if _, err := f.Store.CreateJobs(f.Ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		return errors.New("request timed out")
	}
	f.failingRounds(2)
	f.deadLettered(body)
	if j := f.Job(9404); !j.SendPending {
		t.Fatal("job recorded but never sent, and nothing will send it")
	}
	if n := f.resend(); n != 1 {
		t.Fatalf("the reaper's sweep sent %d jobs, want 1", n)
	}
}

// An arrival the store always refuses ends in the dead-letter queue
// instead of blocking the inbox, with nothing marked: the reaper admits
// its job from GitHub's queued jobs.
func TestDeadLetteredArrivalNeverRecordedMarksNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second, MaxReceives: 2})
	f.writes.failCreate = func([]domain.Job) error { return errors.New("constraint failed") }
	body := f.deliver(jobEvent{action: "queued", id: 9405, runID: 945, labels: poolLabels(945)})
	f.failingRounds(2)
	f.deadLettered(body)
	f.noJob(9405)
	if l := f.logs.Lines("level=ERROR", "dead-lettered", "job=9405", "job_send_pending=false"); len(l) != 1 {
		t.Errorf("want one ERROR, got %q", f.logs.Lines("level=ERROR"))
	}
}

// When the hand-off cannot be written the delivery is kept, not
// dead-lettered: dead-lettered, its job would be stranded.
func TestArrivalIsKeptWhileItsJobCannotBeLeftToTheReaper(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second, MaxReceives: 2})
	f.sends.failSends(domain.QueuePool, errors.New("queue unavailable"))
	body := f.deliver(jobEvent{action: "queued", id: 9406, runID: 946, labels: poolLabels(946)})
	f.failingRounds(1)
	f.writes.setFailures(nil, map[int64]error{9406: errors.New("read timed out")})
	f.Clock.Advance(30 * time.Second)
	f.failingRounds(1)
	if s := f.Stats(domain.QueueInbox); s.InFlight != 1 || len(f.deadLetters()) != 0 {
		t.Fatalf("inbox %+v; want the delivery kept", s)
	}
	if l := f.logs.Lines("level=ERROR"); len(l) != 0 {
		t.Errorf("ERROR lines %q, want none: nothing is lost yet", l)
	}
	if l := f.logs.Lines("level=WARN", "could not be left to the reaper", "read timed out"); len(l) != 1 {
		t.Errorf("want one WARN naming the store's error, got %q", f.logs.Lines("level=WARN"))
	}
	f.writes.setFailures(nil, nil)
	f.Clock.Advance(30 * time.Second)
	f.failingRounds(1)
	f.deadLettered(body)
	if j := f.Job(9406); !j.SendPending {
		t.Fatal("job's message not pending once its delivery is dead-lettered")
	}
}

// A delivery whose job was left to the reaper but that the dead-letter
// queue refused comes again; its send, once it works, and the reaper's
// carry the same dedup id, so the job has one message (on a queue that
// drops a second one; else the consumer drops it, the job no longer
// waiting).
func TestRedeliveryAfterHandOffSendsTheJobOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second, MaxReceives: 2})
	f.sends.failSends(domain.QueuePool, errors.New("queue unavailable"))
	f.sends.failSends(DeadLetterQueue, errors.New("queue unavailable"))
	f.deliver(jobEvent{action: "queued", id: 9407, runID: 947, labels: poolLabels(947)})
	f.failingRounds(2)
	if j := f.Job(9407); !j.SendPending {
		t.Fatal("job's message not pending")
	}
	f.sends.failSends(domain.QueuePool, nil)
	f.Clock.Advance(30 * time.Second)
	f.step()
	f.inboxEmpty()
	if n := f.resend(); n != 1 {
		t.Fatalf("the reaper's sweep sent %d jobs, want 1", n)
	}
	f.wantQueued(domain.QueuePool, 9407)
}
