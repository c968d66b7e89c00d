package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/testfixtures"
	"github.com/bullpen-ci/bullpen/internal/testlog"
	"github.com/bullpen-ci/bullpen/internal/testworld"
	"github.com/bullpen-ci/bullpen/internal/webhook"
)

var t0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

// When the payloads say GitHub queued their job, and started it (in_progress
// and completed ones).
var (
	createdAt = time.Date(2026, 5, 31, 21, 12, 12, 0, time.UTC)
	startedAt = createdAt.Add(30 * time.Second)
)

// fixture is an intake on the test world's store and queue, counted, a
// recording Finisher and GitHub, and a log and registry to inspect.
type fixture struct {
	*testworld.World
	writes *countingStore
	sends  *countingQueue
	fin    *recordingFinisher
	gh     *recordingGitHub
	logs   *testlog.Buffer
	in     *Intake
	seq    int // delivery ids
}

func newFixture(t *testing.T, o Options) *fixture {
	t.Helper()
	f := &fixture{World: testworld.New(t, t0),
		fin: &recordingFinisher{fail: map[int64]error{}}, gh: &recordingGitHub{}, logs: &testlog.Buffer{}}
	f.writes = &countingStore{Store: f.Store}
	f.sends = &countingQueue{Queue: f.Queue, sends: map[string]int{}, fail: map[string]error{}}
	if o.Wait == 0 {
		o.Wait = -1 // never long-poll: the tests send before they step
	}
	var err error
	f.in, err = New(Deps{
		Store: f.writes, Queue: f.sends, Clock: f.Clock,
		Log:     slog.New(slog.NewTextHandler(f.logs, nil)),
		Routing: fixtureRouting, Finisher: f.fin, GitHub: f.gh,
	}, prometheus.NewRegistry(), o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// fixtureRouting is a production stack (serve's default) whose
// configuration also defines a pool for a dev stack.
func fixtureRouting() Routing {
	small := domain.RunnerSpec{Name: "small-x64", Image: "ubuntu24-full-x64", CPU: domain.Range{Min: 2, Max: 2}, RAM: domain.Range{Min: 8, Max: 8}}
	return Routing{
		Environment: "production",
		Pools: map[string]domain.Pool{
			"small-x64": {Name: "small-x64", Environment: "production", Runner: "small-x64"},
			"small-dev": {Name: "small-dev", Environment: "dev", Runner: "small-x64"},
		},
		Runners: map[string]domain.RunnerSpec{"small-x64": small},
	}
}

// Labels in bullpen's forms, pinned to the job's run as workflows write them.
func poolLabels(runID int64) []string {
	return []string{fmt.Sprintf("runs-on=%d/pool=small-x64", runID)}
}
func launchLabels(runID int64) []string {
	return []string{fmt.Sprintf("runs-on=%d/cpu=4/ram=16", runID)}
}

// jobEvent says how to rewrite a real workflow_job example.
type jobEvent struct {
	action     string
	status     string // workflow_job.status; the action's when empty
	id, runID  int64
	repo       string   // owner/name; testfixtures' default when empty
	labels     []string // nil: a label that is not bullpen's
	conclusion string
	runnerName string
}

// payload builds e's workflow_job payload. A job without labels carries
// ["ubuntu-latest"], as GitHub's own examples do: not bullpen's.
func (f *fixture) payload(e jobEvent) []byte {
	labels := e.labels
	if labels == nil {
		labels = []string{"ubuntu-latest"}
	}
	j := testfixtures.Job{Action: e.action, Status: e.status, ID: e.id, RunID: e.runID, Repo: e.repo, Labels: labels,
		Conclusion: e.conclusion, RunnerName: e.runnerName, Created: createdAt}
	if e.action == "in_progress" || e.action == "completed" {
		j.Started = startedAt
	}
	return testfixtures.Payload(j)
}

// deliver puts e in the inbox as the webhook handler would, under a new
// delivery id, and returns the message body.
func (f *fixture) deliver(e jobEvent) []byte {
	f.T.Helper()
	return f.deliverPayload(f.payload(e))
}

// deliverPayload puts a workflow_job payload in the inbox under a new
// delivery id, and returns the message body.
func (f *fixture) deliverPayload(payload []byte) []byte {
	f.T.Helper()
	f.seq++
	id := fmt.Sprintf("delivery-%d", f.seq)
	body, err := json.Marshal(webhook.Delivery{ID: id, Event: "workflow_job", ReceivedAt: f.Clock.Now(), Payload: payload})
	if err != nil {
		f.T.Fatal(err)
	}
	f.sendRaw(body, id)
	return body
}

func (f *fixture) sendRaw(body []byte, dedup string) {
	f.T.Helper()
	if err := f.Queue.Send(f.Ctx, domain.QueueInbox, []domain.SendRequest{{Body: body, DedupID: dedup}}); err != nil {
		f.T.Fatal(err)
	}
}

// step runs one Step and fails the test if it fails.
func (f *fixture) step() int {
	f.T.Helper()
	n, err := f.in.Step(f.Ctx)
	if err != nil {
		f.T.Fatalf("step: %v", err)
	}
	return n
}

// stepFails runs one Step and fails the test unless it fails.
func (f *fixture) stepFails() {
	f.T.Helper()
	if _, err := f.in.Step(f.Ctx); err == nil {
		f.T.Fatal("step succeeded, want it to fail")
	}
}

// failingRounds steps n times, each step failing, a visibility timeout
// apart, so that the last one receives the delivery for the n-th time.
func (f *fixture) failingRounds(n int) {
	f.T.Helper()
	for round := 1; round <= n; round++ {
		if _, err := f.in.Step(f.Ctx); err == nil {
			f.T.Fatalf("round %d: step succeeded, want it to fail", round)
		}
		if round < n {
			f.Clock.Advance(30 * time.Second)
		}
	}
}

func (f *fixture) noJob(id int64) {
	f.T.Helper()
	if j, err := f.Store.GetJob(f.Ctx, id); !errors.Is(err, domain.ErrNotFound) {
		f.T.Fatalf("job %d: %+v, %v; want none", id, j, err)
	}
}

// queued returns the job ids visible in a pool or launch queue, leaving the
// messages there.
func (f *fixture) queued(queue string) []int64 {
	f.T.Helper()
	var ids []int64
	for _, m := range f.Peek(queue, 1000) {
		id, err := jobs.Decode(m.Body)
		if err != nil {
			f.T.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// wantQueued checks that a pool or launch queue holds the jobs want, each
// once, in any order.
func (f *fixture) wantQueued(queue string, want ...int64) {
	f.T.Helper()
	got := f.queued(queue)
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		f.T.Errorf("%s queue holds %v, want %v", queue, got, want)
	}
}

// deadLetters returns the bodies in the dead-letter queue.
func (f *fixture) deadLetters() [][]byte {
	f.T.Helper()
	msgs, err := f.Queue.Receive(f.Ctx, DeadLetterQueue, 1000, time.Minute, 0)
	if err != nil {
		f.T.Fatal(err)
	}
	var out [][]byte
	for _, m := range msgs {
		out = append(out, m.Body)
	}
	return out
}

// deadLettered checks that the inbox is empty and the dead-letter queue
// holds body alone.
func (f *fixture) deadLettered(body []byte) {
	f.T.Helper()
	f.inboxEmpty()
	if dl := f.deadLetters(); len(dl) != 1 || !bytes.Equal(dl[0], body) {
		f.T.Fatalf("dead letters %q, want the delivery byte for byte", dl)
	}
}

func (f *fixture) inboxEmpty() {
	f.T.Helper()
	if s := f.Stats(domain.QueueInbox); s != (domain.QueueStats{}) {
		f.T.Fatalf("inbox holds %+v, want nothing", s)
	}
}

func (f *fixture) events(action, outcome string) float64 {
	return testutil.ToFloat64(f.in.metrics.events.WithLabelValues(action, outcome))
}

// wantEvents checks how many deliveries of action were counted with outcome.
func (f *fixture) wantEvents(action, outcome string, want float64) {
	f.T.Helper()
	if got := f.events(action, outcome); got != want {
		f.T.Errorf("%s/%s counted %v, want %v", action, outcome, got, want)
	}
}

// setJob rewrites a recorded job as another loop would.
func (f *fixture) setJob(id int64, fn func(*domain.Job)) domain.Job {
	f.T.Helper()
	j := f.Job(id)
	j, err := f.Store.TransitionJob(f.Ctx, id, domain.JobGuardOf(j), fn)
	if err != nil {
		f.T.Fatal(err)
	}
	return j
}

// countingStore counts the batch writes of jobs and can fail them, and
// the reads of some jobs.
type countingStore struct {
	Store
	mu         sync.Mutex
	createCall []int // jobs per CreateJobs call
	failCreate func(batch []domain.Job) error
	// failLast, when set, makes every CreateJobs create all its jobs but
	// the last and fail with failLast, reporting which it created: what
	// DynamoDB, which puts job by job, does when one put fails.
	failLast error
	failGet  map[int64]error
	gets     int // GetJob calls
	// failTransitions fails that many of the next TransitionJob calls on
	// a job, with errTransition.
	failTransitions map[int64]int
}

var errTransition = errors.New("store write timed out")

func (s *countingStore) CreateJobs(ctx context.Context, batch []domain.Job) ([]bool, error) {
	s.mu.Lock()
	s.createCall = append(s.createCall, len(batch))
	fail, failLast := s.failCreate, s.failLast
	s.mu.Unlock()
	if fail != nil {
		if err := fail(batch); err != nil {
			return nil, err
		}
	}
	if failLast != nil {
		created, err := s.Store.CreateJobs(ctx, batch[:len(batch)-1])
		if err != nil {
			return nil, err
		}
		return append(created, false), failLast
	}
	return s.Store.CreateJobs(ctx, batch)
}

func (s *countingStore) GetJob(ctx context.Context, id int64) (domain.Job, error) {
	s.mu.Lock()
	err := s.failGet[id]
	s.gets++
	s.mu.Unlock()
	if err != nil {
		return domain.Job{}, err
	}
	return s.Store.GetJob(ctx, id)
}

func (s *countingStore) TransitionJob(ctx context.Context, id int64, g domain.JobGuard, fn func(*domain.Job)) (domain.Job, error) {
	s.mu.Lock()
	fail := s.failTransitions[id] > 0
	if fail {
		s.failTransitions[id]--
	}
	s.mu.Unlock()
	if fail {
		return domain.Job{}, errTransition
	}
	return s.Store.TransitionJob(ctx, id, g, fn)
}

func (s *countingStore) jobReads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

func (s *countingStore) setFailures(failLast error, failGet map[int64]error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failLast, s.failGet = failLast, failGet
}

// countingQueue counts sends by queue and can fail the sends to one queue.
type countingQueue struct {
	domain.Queue
	mu    sync.Mutex
	sends map[string]int
	fail  map[string]error
}

func (q *countingQueue) Send(ctx context.Context, queue string, msgs []domain.SendRequest) error {
	q.mu.Lock()
	q.sends[queue]++
	err := q.fail[queue]
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return q.Queue.Send(ctx, queue, msgs)
}

func (q *countingQueue) sent(queue string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sends[queue]
}

func (q *countingQueue) failSends(queue string, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.fail[queue] = err
}

type finishCall struct {
	job        int64
	conclusion string
}

// recordingFinisher records Finish calls; fail makes a job's calls fail.
type recordingFinisher struct {
	mu    sync.Mutex
	calls []finishCall
	fail  map[int64]error
}

func (r *recordingFinisher) Finish(_ context.Context, id int64, conclusion string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, finishCall{id, conclusion})
	return r.fail[id]
}

func (r *recordingFinisher) failJob(id int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail[id] = err
}

func (r *recordingFinisher) recorded() []finishCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]finishCall(nil), r.calls...)
}

type cancelCall struct {
	repo  string
	runID int64
}

// recordingGitHub records CancelRun; the intake calls nothing else.
type recordingGitHub struct {
	domain.GitHub
	mu      sync.Mutex
	cancels []cancelCall
	err     error
}

func (g *recordingGitHub) CancelRun(_ context.Context, repo string, runID int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cancels = append(g.cancels, cancelCall{repo, runID})
	return g.err
}

func (g *recordingGitHub) cancelled() []cancelCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]cancelCall(nil), g.cancels...)
}
