package jobs_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

type fixture struct{ *testworld.World }

func newFixture(t *testing.T) *fixture {
	t.Helper()
	t.Parallel() // each fixture has its own database and clock
	return &fixture{testworld.New(t, t0)}
}

// createJob records j, as job 42 unless it says otherwise.
func (f *fixture) createJob(j domain.Job) domain.Job {
	f.T.Helper()
	if j.ID == 0 {
		j.ID = 42
	}
	return f.CreateJob(j)
}

// createInstance records an instance in state st bound to job (a job id, 0
// for none), holding the runner registered for it.
func (f *fixture) createInstance(id string, st domain.State, job int64) domain.Instance {
	f.T.Helper()
	in := domain.Instance{ID: id, State: st}
	if job != 0 {
		in.Job, in.RunnerName, in.RunnerConfig = domain.JobKey(job), fmt.Sprintf("%s-%d", id, job), "jit-of-"+id
	}
	return f.CreateInstance(in)
}

// messages receives what a queue holds once every delay is over.
func (f *fixture) messages(queue string) []domain.Message {
	f.T.Helper()
	f.Clock.Advance(domain.MaxQueueDelay)
	msgs, err := f.Queue.Receive(f.Ctx, queue, 10, time.Minute, 0)
	if err != nil {
		f.T.Fatal(err)
	}
	return msgs
}

func TestEncodeDecode(t *testing.T) {
	for _, id := range []int64{1, 42, 1 << 53, 1<<63 - 1} {
		got, err := jobs.Decode(jobs.Encode(id))
		if err != nil || got != id {
			t.Fatalf("round trip of %d: %d, %v", id, got, err)
		}
	}
	for _, body := range []string{``, `{`, `null`, `{}`, `{"job":0}`, `{"job":-3}`, `{"job":"42"}`, `[42]`, `{"job":1.5}`} {
		if id, err := jobs.Decode([]byte(body)); err == nil {
			t.Errorf("Decode(%q) = %d, want an error", body, id)
		}
	}
}

func TestQueueFor(t *testing.T) {
	for route, want := range map[domain.Route]string{
		domain.RoutePool: domain.QueuePool, domain.RouteLaunch: domain.QueueLaunch, "": domain.QueueLaunch,
	} {
		if got := jobs.QueueFor(route); got != want {
			t.Errorf("QueueFor(%q) = %q, want %q", route, got, want)
		}
	}
}

// The dedup id drops a retried send of one attempt but never a requeue,
// nor the send of a job readmitted after a rejection, whose attempts the
// readmission leaves as they were.
func TestSendRequestDedupsPerAttempt(t *testing.T) {
	f := newFixture(t)
	first := jobs.SendRequest(domain.Job{ID: 42}, 0)
	again := jobs.SendRequest(domain.Job{ID: 42}, 0)
	requeued := jobs.SendRequest(domain.Job{ID: 42, Attempts: 1}, time.Second)
	if requeued.Delay != time.Second || first.DedupID == requeued.DedupID {
		t.Fatalf("requeue %+v must differ from the first send %+v", requeued, first)
	}
	readmitted := jobs.SendRequest(domain.Job{ID: 42, Attempts: 1, Readmissions: 1}, 0)
	readmittedAgain := jobs.SendRequest(domain.Job{ID: 42, Attempts: 1, Readmissions: 2}, 0)
	for _, r := range []domain.SendRequest{first, again, requeued, readmitted, readmittedAgain} {
		if err := f.Queue.Send(f.Ctx, domain.QueueLaunch, []domain.SendRequest{r}); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(f.messages(domain.QueueLaunch)); got != 4 {
		t.Fatalf("queue holds %d messages, want 4 (the retry dropped, each readmission sent)", got)
	}
}

func TestOfferToResourcePool(t *testing.T) {
	f := newFixture(t)
	e := domain.ResourcePoolEntry{
		InstanceID: "bp-1", CloudID: "i-1", UsageClass: "spot", InstanceType: "m7a.xlarge",
		CPU: 4, Mem: 16384, ResourceClass: "medium", Threshold: t0.Add(10 * time.Minute),
	}
	if err := jobs.OfferToResourcePool(f.Ctx, f.Queue, "linux-medium", e); err != nil {
		t.Fatal(err)
	}
	msgs := f.messages(domain.ResourcePoolQueue("linux-medium"))
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	var got domain.ResourcePoolEntry
	if err := json.Unmarshal(msgs[0].Body, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Threshold.Equal(e.Threshold) {
		t.Fatalf("threshold %s, want %s", got.Threshold, e.Threshold)
	}
	got.Threshold = e.Threshold
	if got != e {
		t.Fatalf("entry %+v, want %+v", got, e)
	}
	for _, key := range []string{`"instanceId"`, `"usageClass"`, `"resourceClass"`, `"threshold"`} {
		if !strings.Contains(string(msgs[0].Body), key) {
			t.Errorf("body %s lacks the resource-pool entry's key %s", msgs[0].Body, key)
		}
	}
}
