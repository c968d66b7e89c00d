package provision

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/loop"
	"github.com/bullpen-ci/bullpen/internal/loop/looptest"
)

func TestSettleDeletesServedMessagesAndRequeuesTheOthers(t *testing.T) {
	f := newFixture(t)
	in := f.reusable(small, 1, nil)[0]
	odd := domain.RunnerSpec{Name: "odd", Image: "ubuntu-24.04", CPU: domain.Range{Min: 2}}
	f.cloud.FailNext(sim.OpDescribeImages, 2, domain.ErrThrottled) // the odd job's two attempts
	f.queueJobs(small, 100, 1)
	f.queueJobs(odd, 101, 1)
	f.queueJobs(small, 102, 1)
	if err := f.agents.Finish(f.Ctx, 102, "cancelled"); err != nil {
		t.Fatal(err)
	}
	extra := []domain.SendRequest{{Body: []byte("junk")}, {Body: jobs.Encode(999)}, {Body: jobs.Encode(100)}}
	if err := f.Queue.Send(f.Ctx, domain.QueueLaunch, extra); err != nil {
		t.Fatal(err)
	}

	f.serve()

	f.wantJob(100, domain.JobAssigned, domain.ViaReuse, in.ID)
	f.wantRequeued(101, "throttled")
	if st := f.Stats(domain.QueueLaunch); st.Visible != 0 || st.InFlight != 0 || st.Delayed != 1 {
		t.Fatalf("launch queue %+v: only the unserved job may come back", st)
	}
	if counter(t, f.p.metrics.jobs, "reuse") != 1 || counter(t, f.p.metrics.jobs, "requeued") != 1 {
		t.Fatal("metrics do not show one reuse and one requeue")
	}
	if got := counter(t, f.p.metrics.jobs, "dropped"); got != 4 {
		t.Fatalf("%v dropped; want the cancelled job, the junk, the unknown job and the duplicate", got)
	}
	if n := f.cloud.Calls()["CreateFleet"]; n != 0 {
		t.Fatalf("%d fleets: a duplicate message must not provision its job twice", n)
	}

	// Each retry waits twice as long: 2 s after the first attempt, 4 s
	// after the second.
	f.Clock.Advance(2 * time.Second)
	f.serve()
	if j := f.Job(101); j.Attempts != 2 {
		t.Fatalf("attempts %d", j.Attempts)
	}
	f.Clock.Advance(4*time.Second - time.Millisecond)
	if st := f.Stats(domain.QueueLaunch); st.Visible != 0 || st.Delayed != 1 {
		t.Fatalf("retry visible before its backoff: %+v", st)
	}
	f.Clock.Advance(time.Millisecond)
	if st := f.Stats(domain.QueueLaunch); st.Visible != 1 {
		t.Fatalf("retry not visible after its backoff: %+v", st)
	}
}

func TestRequeueBackoffIsCappedAtAMinute(t *testing.T) {
	f := newFixture(t)
	j := f.queueJobs(small, 100, 1)[0]
	f.receive()
	j, err := f.Store.TransitionJob(f.Ctx, j.ID, domain.JobGuardOf(j), func(x *domain.Job) { x.Attempts = 9 })
	if err != nil {
		t.Fatal(err)
	}
	if outcome, err := f.p.requeue(f.Ctx, &request{job: j, attempts: j.Attempts}); outcome != outcomeRequeued || err != nil {
		t.Fatalf("requeue = %q, %v", outcome, err)
	}
	f.Clock.Advance(time.Minute - time.Millisecond)
	if st := f.Stats(domain.QueueLaunch); st.Delayed != 1 {
		t.Fatalf("launch queue %+v", st)
	}
	f.Clock.Advance(time.Millisecond)
	if st := f.Stats(domain.QueueLaunch); st.Visible != 1 {
		t.Fatalf("launch queue %+v", st)
	}
}

// failingSends refuses every send to one queue.
type failingSends struct {
	domain.Queue
	queue string
}

func (q failingSends) Send(ctx context.Context, name string, msgs []domain.SendRequest) error {
	if name == q.queue {
		return errors.New("queue unavailable")
	}
	return q.Queue.Send(ctx, name, msgs)
}

func TestAJobThatCannotBeRequeuedKeepsItsMessage(t *testing.T) {
	f := newFixture(t, func(_ *fixture, d *Deps, _ *Options) {
		d.Queue = failingSends{Queue: d.Queue, queue: domain.QueueLaunch}
	})
	f.cloud.FailNext(sim.OpDescribeImages, 1, domain.ErrThrottled) // not served, to be retried
	f.queueJobs(small, 100, 1)
	f.serve()
	if st := f.Stats(domain.QueueLaunch); st.InFlight != 1 {
		t.Fatalf("launch queue %+v: the message must stay in flight", st)
	}
	f.Clock.Advance(5 * time.Minute)
	if st := f.Stats(domain.QueueLaunch); st.Visible != 1 {
		t.Fatalf("launch queue %+v: the message must come back after its visibility", st)
	}
}

func TestLocalExhaustionSendsTheJobToCreation(t *testing.T) {
	f := newFixture(t, func(_ *fixture, d *Deps, _ *Options) { d.Queue = undelayed{d.Queue} })
	spot := domain.RunnerSpec{Name: "small", CPU: domain.Range{Min: 2}, Spot: "lowest-price", Family: []string{"c7a"}}
	misses := f.reusable(spot, 2, nil)
	f.queueJobs(small, 100, 1)
	f.serve()
	if j := f.Job(100); j.Status != domain.JobAssigned || j.Via != domain.ViaCold {
		t.Fatalf("job %s via %q", j.Status, j.Via)
	}
	if counter(t, f.p.metrics.exhausted, "local") != 1 {
		t.Fatal("local exhaustion not counted")
	}
	got := f.poolEntries("small")
	slices.Sort(got)
	if want := []string{misses[0].ID, misses[1].ID}; !slices.Equal(got, want) {
		t.Fatalf("resource pool %v, want the misses %v back", got, want)
	}
}

// flakyTransition fails the first transition of one instance with an
// error that is neither a conflict nor not-found.
type flakyTransition struct {
	Store
	id   string
	once *sync.Once
}

func (s flakyTransition) Transition(ctx context.Context, id string, g domain.Guard, fn func(*domain.Instance)) (domain.Instance, error) {
	failed := false
	if id == s.id {
		s.once.Do(func() { failed = true })
	}
	if failed {
		return domain.Instance{}, errors.New("database is locked")
	}
	return s.Store.Transition(ctx, id, g, fn)
}

func TestAClaimThatErrsPutsTheEntryBack(t *testing.T) {
	var flaky *flakyTransition
	f := newFixture(t, func(_ *fixture, d *Deps, _ *Options) {
		flaky = &flakyTransition{Store: d.Store, once: &sync.Once{}}
		d.Store = flaky
	})
	in := f.reusable(small, 1, nil)[0]
	flaky.id = in.ID
	f.queueJobs(small, 100, 1)
	f.serve()
	f.wantState(in.ID, domain.StateReady)
	if st := f.Stats(domain.ResourcePoolQueue("small")); st.Delayed != 1 {
		t.Fatalf("resource pool %+v: the entry must come back", st)
	}
	if j := f.Job(100); j.Via != domain.ViaCold {
		t.Fatalf("job via %q", j.Via)
	}
}

func TestRunServesUntilCancelledAndFinishesWhatItReceived(t *testing.T) {
	f := newFixture(t, withOptions(func(o *Options) { o.Wait = 0 })) // the default long poll
	in := f.reusable(small, 1, nil)[0]
	notified := make(chan struct{})
	f.setAgent(func(f *fixture, cloudID string) {
		close(notified)
		registerAtOnce(f, cloudID)
	})
	f.queueJobs(small, 100, 1)
	ctx, cancel := context.WithCancel(f.Ctx)
	stopped := make(chan error)
	go func() { stopped <- looptest.Run(ctx, f.Clock, f.p.Loop()) }()
	<-notified
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	f.wantJob(100, domain.JobAssigned, domain.ViaReuse, in.ID)
	if st := f.Stats(domain.QueueLaunch); st != (domain.QueueStats{}) {
		t.Fatalf("launch queue %+v", st)
	}
}

// A burst reaching the launch queue in pieces (the intake's and the
// dispatcher's batches) is received as one batch while it keeps coming,
// and so launched in one fleet, not one per piece.
func TestABurstArrivingInPiecesIsReceivedAsOneBatch(t *testing.T) {
	f := newFixture(t, withOptions(func(o *Options) { o.Wait = time.Second }))
	f.queueJobs(small, 100, 10)
	got := make(chan []domain.Message)
	go func() {
		msgs, err := f.p.receive(f.Ctx)
		if err != nil {
			t.Error(err)
		}
		got <- msgs
	}()
	lingering := make(chan struct{})
	go func() { f.Clock.BlockUntil(1); close(lingering) }()
	select {
	case msgs := <-got:
		t.Fatalf("received %d jobs without waiting for the rest of the burst", len(msgs))
	case <-lingering:
	}
	for piece := 1; piece < 4; piece++ {
		f.Clock.BlockUntil(1) // lingering for more
		f.queueJobs(small, int64(100+10*piece), 10)
		f.Clock.Advance(f.p.opts.Linger)
	}
	f.Clock.BlockUntil(1)
	f.Clock.Advance(f.p.opts.Linger) // nothing more came
	if msgs := <-got; len(msgs) != 40 {
		t.Fatalf("received %d of the burst's 40 jobs in one batch", len(msgs))
	}
}

func TestRunWithoutLongPollWaitsBetweenEmptyReceives(t *testing.T) {
	f := newFixture(t)
	looptest.CheckIdlePolls(t, f.Clock, domain.QueueLaunch, idlePoll, func(wrap func(domain.Queue) domain.Queue) loop.Loop {
		f.deps.Queue = wrap(f.deps.Queue)
		return f.newProvisioner(nil, Options{ControllerID: "ctl-test", Wait: -1}).Loop()
	})
}

func TestNewChecksItsDependencies(t *testing.T) {
	f := newFixture(t)
	if _, err := New(f.deps, nil, Options{}); err == nil || !strings.Contains(err.Error(), "controller id") {
		t.Fatalf("no controller id: %v", err)
	}
	d := f.deps
	d.Registrations = nil
	if _, err := New(d, nil, Options{ControllerID: "c"}); err == nil || !strings.Contains(err.Error(), "registrations") {
		t.Fatalf("no registrations: %v", err)
	}
	reg := prometheus.NewRegistry()
	f.newProvisioner(reg, Options{ControllerID: "c"})
	if _, err := New(f.deps, reg, Options{ControllerID: "c"}); err == nil {
		t.Fatal("metrics registered twice without an error")
	}
}

// inFlightAtReceive notes, at every receive from the launch queue, how
// many launch messages were received and not yet settled: the jobs of the
// batches in flight.
type inFlightAtReceive struct {
	domain.Queue
	mu   *sync.Mutex
	seen *[]int
}

func (q inFlightAtReceive) Receive(ctx context.Context, name string, max int, vis, wait time.Duration) ([]domain.Message, error) {
	if name == domain.QueueLaunch {
		st, err := q.Queue.Stats(ctx, name)
		if err != nil {
			return nil, err
		}
		q.mu.Lock()
		*q.seen = append(*q.seen, st.InFlight)
		q.mu.Unlock()
	}
	return q.Queue.Receive(ctx, name, max, vis, wait)
}

// Each batch may hold Parallelism workers for CreationTimeout, so Run
// serves a bounded number at once and, at the bound, leaves the rest of
// the launch queue where it is.
func TestRunServesABoundedNumberOfBatchesAtOnce(t *testing.T) {
	var mu sync.Mutex
	var seen []int
	f := newFixture(t, func(_ *fixture, d *Deps, o *Options) {
		d.Queue = inFlightAtReceive{Queue: d.Queue, mu: &mu, seen: &seen}
		o.Batches, o.BatchMax = 1, 1
	})
	holding, release, served := make(chan struct{}), make(chan struct{}), make(chan struct{})
	f.setAgent(func(f *fixture, cloudID string) {
		if f.Instances(domain.InstanceFilter{CloudID: cloudID})[0].Job == "101" {
			close(served)
			registerAtOnce(f, cloudID)
			return
		}
		// Job 100's agent registers only when the test says: until then its
		// batch is in flight and holds the bound.
		close(holding)
		f.agentW.Add(1)
		go func() {
			defer f.agentW.Done()
			<-release
			f.register(cloudID)
		}()
	})
	f.queueJobs(small, 100, 2)
	ctx, cancel := context.WithCancel(f.Ctx)
	stopped := make(chan error)
	go func() { stopped <- looptest.Run(ctx, f.Clock, f.p.Loop()) }()
	<-holding
	select {
	case <-served:
		t.Error("job 101 was served while job 100's batch held the bound")
	default:
	}
	close(release)
	<-served // the bound freed up: job 101 was received and served
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	for i, n := range seen {
		if n > 0 {
			t.Fatalf("receive %d came with %d launch jobs in flight, beyond the bound of 1 batch (all: %v)", i+1, n, seen)
		}
	}
	for _, id := range []int64{100, 101} {
		if j := f.Job(id); j.Status != domain.JobAssigned || j.Via != domain.ViaCold {
			t.Fatalf("job %d: %s via %q (%s)", id, j.Status, j.Via, j.Reason)
		}
	}
}

func TestBatchesInFlightDefaultTo64(t *testing.T) {
	if got := newFixture(t).p.opts.Batches; got != 64 {
		t.Fatalf("Batches defaults to %d, want 64", got)
	}
}
