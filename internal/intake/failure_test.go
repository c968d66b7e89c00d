package intake

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

func envelope(t *testing.T, payload string) []byte {
	t.Helper()
	b, err := json.Marshal(webhook.Delivery{ID: "bad", Event: "workflow_job", ReceivedAt: t0, Payload: json.RawMessage(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUndecodableMessagesAreDeadLettered(t *testing.T) {
	t.Parallel()
	cases := map[string][]byte{
		"not JSON":                 []byte("\x00\x01 not json"),
		"envelope without id":      []byte(`{"event":"workflow_job","payload":{}}`),
		"payload not an event":     envelope(t, `[1,2,3]`),
		"workflow_job missing":     envelope(t, `{"action":"queued","repository":{"full_name":"a/b"}}`),
		"job id of wrong type":     envelope(t, `{"action":"queued","repository":{"full_name":"a/b"},"workflow_job":{"id":"x"}}`),
		"labels hold a non-string": envelope(t, `{"action":"queued","repository":{"full_name":"a/b"},"workflow_job":{"id":1,"run_id":2,"labels":[null]}}`),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.sendRaw(body, "")
			f.step()
			f.deadLettered(body)
			if got := testutil.ToFloat64(f.in.metrics.deadLettered); got != 1 {
				t.Errorf("dead-lettered counted %v, want 1", got)
			}
			if l := f.logs.Lines("level=ERROR", "dead-lettered"); len(l) != 1 {
				t.Errorf("want one ERROR, got %q", l)
			}
		})
	}
}

// An action bullpen does not act on is done with, not an error.
func TestUnhandledActionIsDropped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.sendRaw(envelope(t, `{"action":"requested","repository":{"full_name":"a/b"},"workflow_job":{"id":1,"run_id":2,"labels":[]}}`), "")
	f.step()
	f.inboxEmpty()
	if dl := f.deadLetters(); len(dl) != 0 {
		t.Fatalf("dead letters %q, want none", dl)
	}
}

// When the dead-letter queue refuses the message, it stays in the inbox.
func TestUndecodableMessageIsKeptWhenDeadLetteringFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second})
	body := []byte("garbage")
	f.sendRaw(body, "")
	f.sends.failSends(DeadLetterQueue, errors.New("queue unavailable"))
	f.step()
	if s := f.Stats(domain.QueueInbox); s.InFlight != 1 {
		t.Fatalf("inbox %+v, want the message kept", s)
	}
	// Kept for another try, nothing is lost yet: no ERROR.
	if l := f.logs.Lines("level=ERROR"); len(l) != 0 {
		t.Errorf("ERROR lines %q, want none", l)
	}
	if l := f.logs.Lines("level=WARN", "dead-letter queue refused", "queue unavailable"); len(l) != 1 {
		t.Errorf("want one WARN naming the dead-letter queue's error, got %q", f.logs.Lines())
	}
	f.sends.failSends(DeadLetterQueue, nil)
	f.Clock.Advance(30 * time.Second)
	f.step()
	f.deadLettered(body)
	if l := f.logs.Lines("level=ERROR", "does not parse; dead-lettered"); len(l) != 1 {
		t.Errorf("want one ERROR once moved, got %q", f.logs.Lines("level=ERROR"))
	}
}

func TestFailingFinisherRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second, MaxReceives: 3})
	f.fin.failJob(9001, errors.New("store busy"))
	body := f.deliver(jobEvent{action: "completed", id: 9001, runID: 91, labels: poolLabels(91), conclusion: "success"})
	for round := 1; round <= 3; round++ {
		_, err := f.in.Step(f.Ctx)
		if err == nil || !strings.Contains(err.Error(), "job 9001 completed") {
			t.Fatalf("round %d: error %v, want the Finisher's", round, err)
		}
		if n := len(f.fin.recorded()); n != round {
			t.Fatalf("round %d: %d Finish calls", round, n)
		}
		if round < 3 {
			if s := f.Stats(domain.QueueInbox); s.InFlight != 1 || len(f.deadLetters()) != 0 {
				t.Fatalf("round %d: inbox %+v; want the message kept for retry", round, s)
			}
			f.Clock.Advance(30 * time.Second)
		}
	}
	f.deadLettered(body)
	f.wantEvents("completed", "recorded", 0)
}

func TestFinisherThatRecoversIsRetriedOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second, MaxReceives: 3})
	f.fin.failJob(9002, errors.New("transient"))
	f.deliver(jobEvent{action: "completed", id: 9002, runID: 92, labels: poolLabels(92), conclusion: "success"})
	f.stepFails()
	f.fin.failJob(9002, nil)
	f.Clock.Advance(30 * time.Second)
	f.step()
	f.inboxEmpty()
	if n := len(f.fin.recorded()); n != 2 || len(f.deadLetters()) != 0 {
		t.Fatalf("%d Finish calls, %d dead letters; want 2 and none", n, len(f.deadLetters()))
	}
	f.wantEvents("completed", "recorded", 1)
}

// A queued event the store refuses holds back only itself, and the start
// and end of its job wait for it: applied first, they would be lost and
// the late queued event would reopen a job GitHub already ran.
func TestRefusedArrivalHoldsBackOnlyItsOwnJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second, MaxReceives: 3})
	refused := true
	f.writes.failCreate = func(batch []domain.Job) error {
		for _, j := range batch {
			if j.ID == 9102 && refused {
				return errors.New("disk full")
			}
		}
		return nil
	}
	f.deliver(jobEvent{action: "queued", id: 9101, runID: 911, labels: poolLabels(911)})
	f.deliver(jobEvent{action: "queued", id: 9102, runID: 912, labels: poolLabels(912)})
	f.deliver(jobEvent{action: "in_progress", id: 9102, runID: 912, labels: poolLabels(912), runnerName: "r-9102"})
	f.deliver(jobEvent{action: "completed", id: 9102, runID: 912, labels: poolLabels(912), conclusion: "success"})
	if _, err := f.in.Step(f.Ctx); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("step error %v, want the store's", err)
	}
	if j := f.Job(9101); j.Status != domain.JobQueued {
		t.Fatalf("job 9101 %s, want recorded despite its neighbour", j.Status)
	}
	f.wantQueued(domain.QueuePool, 9101)
	if s := f.Stats(domain.QueueInbox); s.InFlight != 3 || len(f.fin.recorded()) != 0 {
		t.Fatalf("inbox %+v, %d Finish calls; want job 9102's three deliveries kept, unapplied", s, len(f.fin.recorded()))
	}

	refused = false
	f.Clock.Advance(30 * time.Second)
	f.step()
	f.inboxEmpty()
	if j := f.Job(9102); j.Status != domain.JobRunning || j.RunnerName != "r-9102" {
		t.Fatalf("job 9102 %s on %q, want running", j.Status, j.RunnerName)
	}
	if got := f.fin.recorded(); !slices.Equal(got, []finishCall{{9102, "success"}}) {
		t.Fatalf("Finish calls %v", got)
	}
}

// A failed send leaves the deliveries for retry; the retry sends the jobs
// recorded the first time.
func TestFailedSendIsRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{Visibility: 30 * time.Second})
	f.sends.failSends(domain.QueuePool, errors.New("queue unavailable"))
	f.deliver(jobEvent{action: "queued", id: 9301, runID: 931, labels: poolLabels(931)})
	f.stepFails()
	f.sends.failSends(domain.QueuePool, nil)
	f.Clock.Advance(30 * time.Second)
	f.step()
	f.inboxEmpty()
	f.wantQueued(domain.QueuePool, 9301)
}
