package dispatch

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bullpen-ci/bullpen/internal/domain"
	ghsim "github.com/bullpen-ci/bullpen/internal/github/sim"
	"github.com/bullpen-ci/bullpen/internal/jobs"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// counter reads one outcome of a dispatcher's jobs metric.
func counter(t *testing.T, c *prometheus.CounterVec, label string) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(label).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

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
	if got := counter(t, d.metrics.jobs, "retried"); got != 10 {
		t.Fatalf("retried counted %v, want 10", got)
	}
	if warns := log.Lines("level=WARN"); len(warns) != 2 {
		t.Fatalf("warnings %q; want one for each failed batch", warns)
	}
	assertNoInstanceHeldForNothing(t, f)
}
