package converger

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// logs sends the converger's log, down to DEBUG, to a buffer the test reads.
func (w *world) logs() *testlog.Buffer {
	buf := &testlog.Buffer{}
	w.conv.log = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return buf
}

func (w *world) imageErrors() float64 {
	return testutil.ToFloat64(w.conv.metrics.cloudErrors.WithLabelValues("DescribeImages"))
}

func TestImageThatDoesNotResolveStopsOnlyThatPool(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 1}, sim.Options{Images: map[string]string{"other": "ami-1"}}, Options{})
	logs := w.logs()
	for cycle := 1; cycle <= 3; cycle++ {
		r := w.cycle()
		if !errors.Is(r.Err, domain.ErrUnknownImage) || !r.Plan.Empty() {
			t.Fatalf("err %v plan %s", r.Err, Describe(r.Plan))
		}
		if got := w.imageErrors(); got != float64(cycle) {
			t.Fatalf("after cycle %d: %v failed DescribeImages counted", cycle, got)
		}
		w.Clock.Pass(30 * time.Second)
	}
	if n := len(w.rows()); n != 0 {
		t.Fatalf("%d rows created without an image", n)
	}
	if n := len(logs.Lines("level=ERROR", "ubuntu24")); n != 1 {
		t.Fatalf("%d ERROR lines over three cycles, want one when the image went missing:\n%s", n, logs)
	}
	// The target gauge is the pool status's: a pool that never converged
	// has one all the same.
	st, err := w.Store.ListPoolStatus(context.Background())
	if err != nil || len(st) != 1 || st[0].Target != (domain.Target{Hot: 1}) || st[0].LastError == "" {
		t.Fatalf("pool status %+v %v", st, err)
	}
	w.cloud.PublishImage("ubuntu24")
	if r := w.cycle(); r.Err != nil || Describe(r.Plan) != "create/hot×1" {
		t.Fatalf("once published: err %v plan %s", r.Err, Describe(r.Plan))
	}
	if n := len(logs.Lines("level=INFO", "resolves again")); n != 1 {
		t.Errorf("%d lines saying the image resolves again", n)
	}
}

func TestThrottledImageLookupIsAWarningAndACloudError(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 1}, sim.Options{}, Options{})
	logs := w.logs()
	w.cloud.FailNext(sim.OpDescribeImages, 1, domain.ErrThrottled)
	if r := w.cycle(); !errors.Is(r.Err, domain.ErrThrottled) || !r.Plan.Empty() {
		t.Fatalf("err %v plan %s", r.Err, Describe(r.Plan))
	}
	if got := w.imageErrors(); got != 1 {
		t.Fatalf("%v failed DescribeImages counted", got)
	}
	if n, warn := len(logs.Lines("level=ERROR")), len(logs.Lines("level=WARN", "ubuntu24")); n != 0 || warn != 1 {
		t.Fatalf("%d ERROR and %d WARN lines for a throttled call:\n%s", n, warn, logs)
	}
	w.Clock.Pass(30 * time.Second)
	if r := w.cycle(); r.Err != nil || Describe(r.Plan) != "create/hot×1" {
		t.Fatalf("next cycle: err %v plan %s", r.Err, Describe(r.Plan))
	}
}

// A pool whose image stops resolving creates nothing and rolls nothing,
// for neither its image nor which members are outdated can be known, but
// still settles its stops, forgets machines the cloud lost and sheds what
// its target no longer wants; its status keeps saying why it cannot grow.
func TestPoolWhoseImageStopsResolvingStillShedsAndSettles(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 1, Stopped: 2}, sim.Options{Latency: latency, Images: map[string]string{"ubuntu24": "ami-1"}}, Options{})
	for range 2 { // create; warming
		w.cycle()
		w.Clock.Pass(30 * time.Second)
	}
	if got := Describe(w.cycle().Plan); got != "stop/warm×2" {
		t.Fatalf("at 60 s plan %q", got)
	}
	w.edit(func(ps *PoolSpec) { ps.Runner.Image = "ubuntu24-typo" })
	unresolved := func(r PoolReport, want string) {
		t.Helper()
		if !errors.Is(r.Err, domain.ErrUnknownImage) || Describe(r.Plan) != want {
			t.Fatalf("plan %q err %v, want plan %q and the image error", Describe(r.Plan), r.Err, want)
		}
		if st, err := w.Store.ListPoolStatus(context.Background()); err != nil || len(st) != 1 ||
			!strings.Contains(st[0].LastError, `resolve image "ubuntu24-typo"`) {
			t.Fatalf("pool status %+v %v", st, err)
		}
	}
	w.Clock.Pass(30 * time.Second)
	unresolved(w.cycle(), "settle/stopped×2")
	if n := len(w.rows(domain.StateStopped)); n != 2 {
		t.Fatalf("%d members stopped", n)
	}
	w.Clock.Pass(30 * time.Second)
	unresolved(w.cycle(), "") // nothing outdated, nothing to do

	parked := w.rows(domain.StateStopped)[0]
	if err := w.cloud.Terminate(context.Background(), []string{parked.CloudID}); err != nil {
		t.Fatal(err)
	}
	w.setTarget(domain.Target{Hot: 2, Stopped: 2})
	w.Clock.Pass(30 * time.Second)
	unresolved(w.cycle(), "forget/gone×1")

	w.setTarget(domain.Target{})
	w.Clock.Pass(30 * time.Second)
	unresolved(w.cycle(), "terminate/excess×1 terminate/excess×1")
	if n := len(w.rows(domain.StateTerminated)); n != 3 {
		t.Fatalf("%d rows terminated, want all 3", n)
	}
}
