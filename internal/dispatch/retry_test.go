package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/testlog"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

// withLog sends the dispatcher's log to buf.
func withLog(buf *testlog.Buffer) func(*Deps) {
	return func(d *Deps) { d.Log = slog.New(slog.NewTextHandler(buf, nil)) }
}

// While GitHub refuses registrations, a pool job is tried again after a
// delay that doubles with each try, and each batch's failures make one
// warning, not one a job: under an outage a fixed short delay meant a
// line, a tag call and maybe a start for every queued job every 2 s.
func TestRegistrationOutageBacksOffAndWarnsOncePerBatch(t *testing.T) {
	f := newFixture(t)
	f.members("p", domain.RoleHot, domain.StateReady, 5)
	f.queueJobs("p", 1, 5)
	f.gh.FailNext(ghsim.OpRegisterRunner, 10, domain.ErrRateLimited) // two tries of 5 jobs
	var log testlog.Buffer
	d := f.dispatcherWith(withLog(&log), Options{Wait: -1})

	step := func(wantReceived, wantAssigned int) {
		t.Helper()
		res, err := d.Step(f.Ctx)
		if err != nil || res.Received != wantReceived || res.Assigned != wantAssigned {
			t.Fatalf("at %s: %+v %v; want %d received, %d assigned", f.Clock.Now().Sub(t0), res, err, wantReceived, wantAssigned)
		}
	}
	step(5, 0)
	if warns := log.Lines("level=WARN"); len(warns) != 1 || len(log.Lines("level=WARN", "count=5", "rate_limited:5")) != 1 {
		t.Fatalf("warnings %q; want one for the batch, with its count and cause", warns)
	}
	f.Clock.Advance(jobs.RequeueDelay)
	step(5, 0) // their second try, after the first delay
	f.Clock.Advance(2*jobs.RequeueDelay - time.Millisecond)
	step(0, 0) // the second delay is twice the first
	f.Clock.Advance(time.Millisecond)
	step(5, 5)
	if got := testutil.ToFloat64(d.metrics.jobs.WithLabelValues("retried")); got != 10 {
		t.Fatalf("retried counted %v, want 10", got)
	}
	if warns := log.Lines("level=WARN"); len(warns) != 2 {
		t.Fatalf("warnings %q; want one for each failed batch", warns)
	}
	assertNoInstanceHeldForNothing(t, f)
}

// listFailingStore fails its next ListJobs call once armed.
type listFailingStore struct {
	Store
	testworld.FailOnce
}

func (s *listFailingStore) ListJobs(ctx context.Context, filter domain.JobFilter) ([]domain.Job, error) {
	if s.Fire() {
		return nil, errStoreDown
	}
	return s.Store.ListJobs(ctx, filter)
}

// A batch whose jobs cannot be read fails the step, so that the loop
// counts it and backs off, and loses none of its messages: they come back
// after the visibility timeout. An unreadable message is dropped all the
// same.
func TestUnreadableJobsFailTheStepAndKeepTheirMessages(t *testing.T) {
	f := newFixture(t)
	f.members("p", domain.RoleHot, domain.StateReady, 3)
	f.queueJobs("p", 1, 3)
	if err := f.Queue.Send(f.Ctx, domain.QueuePool, []domain.SendRequest{{Body: []byte("junk")}}); err != nil {
		t.Fatal(err)
	}
	d := f.dispatcherWith(func(d *Deps) {
		st := &listFailingStore{Store: d.Store}
		st.Arm()
		d.Store = st
	}, Options{Wait: -1})

	res, err := d.Step(f.Ctx)
	if !errors.Is(err, errStoreDown) || res.Received != 4 || res.Skipped != 1 {
		t.Fatalf("result %+v err %v; want the store's error, and the junk message skipped", res, err)
	}
	if st := f.Stats(domain.QueuePool); st.InFlight != 3 || st.Visible+st.Delayed != 0 {
		t.Fatalf("pool queue %+v; want the 3 jobs' messages in flight", st)
	}
	f.wantRestServed(t, 3)
}

// An overflow that cannot be recorded is logged and counted; its pool
// message comes back after the visibility timeout and is settled then.
func TestUnrecordedOverflowIsLoggedAndCounted(t *testing.T) {
	f := newFixture(t)
	f.queueJobs("p", 1, 2) // the pool has no instance: both overflow
	var log testlog.Buffer
	d := f.dispatcherWith(func(d *Deps) {
		withLog(&log)(d)
		d.Store = &cancellingStore{Store: f.Store, cancel: 1}
	}, Options{Wait: -1})

	res, err := d.Step(f.Ctx)
	if err != nil || res.Overflowed != 1 || res.OverflowFailed != 1 {
		t.Fatalf("result %+v err %v; want one job overflowed, one not recorded", res, err)
	}
	if got := testutil.ToFloat64(d.metrics.jobs.WithLabelValues("overflow_failed")); got != 1 {
		t.Fatalf("overflow_failed counted %v, want 1", got)
	}
	if lines := log.Lines("level=WARN", "record overflowed pool jobs", "failed=1"); len(lines) != 1 {
		t.Fatalf("log %q; want one warning for the unrecorded overflow", log.String())
	}
	if st := f.Stats(domain.QueuePool); st.InFlight != 1 {
		t.Fatalf("pool queue %+v; want the cancelled job's message in flight", st)
	}
	f.Clock.Advance(d.opts.Visibility)
	if res, err := d.Step(f.Ctx); err != nil || res.Skipped != 1 {
		t.Fatalf("after the visibility timeout: %+v %v; want the cancelled job's message skipped", res, err)
	}
}
