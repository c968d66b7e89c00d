package converger

import (
	"context"
	"errors"
	"log/slog"
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
