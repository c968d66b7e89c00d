package app_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/config"
)

// What the terminator does, and the cloud calls it fails, are served on
// /metrics from the start, at zero until something happens.
func TestTheTerminatorsMetricsAreServed(t *testing.T) {
	a := newApp(t, app.Options{})
	const want = 4 // kind="expired", "terminated", "refused", op="terminate"
	n, err := testutil.GatherAndCount(a.Registry(), "bullpen_terminator_actions_total", "bullpen_terminator_cloud_errors_total")
	if err != nil || n != want {
		t.Fatalf("%d terminator series served, %v; want %d", n, err, want)
	}
}

// Rejected jobs' series are served at zero from the start, at the intake
// and the provisioner, so that BullpenJobsRejected's increase sees the
// first rejection.
func TestRejectionsAreServedFromTheStart(t *testing.T) {
	a := newApp(t, app.Options{})
	for _, name := range []string{"bullpen_intake_events_total", "bullpen_provision_jobs_total"} {
		if n, err := testutil.GatherAndCount(a.Registry(), name); err != nil || n != 1 {
			t.Errorf("%s: %d series, %v; want the rejections' at zero", name, n, err)
		}
	}
}

// The demand autoscaler of a pool with an autoscale block counts its
// decisions on /metrics once the converger has asked it for a target.
func TestThePoolAutoscalersDecisionsAreServed(t *testing.T) {
	cfg, err := config.Parse("runs-on.yml", []byte(example+`
  burst:
    runner: small
    schedule:
      - name: default
        hot: 1
    autoscale:
      max: 3
`))
	if err != nil {
		t.Fatal(err)
	}
	a := newApp(t, app.Options{})
	a.SetConfig(cfg)
	if _, err := a.Converger.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(a.Registry(), "bullpen_autoscale_decisions_total", "bullpen_autoscale_skipped_polls_total")
	if err != nil || n != 4 { // the burst pool's up, down, none and skipped polls
		t.Fatalf("%d autoscaler series served, %v; want 4", n, err)
	}
	families, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	decided := 0.0
	for _, f := range families {
		if f.GetName() == "bullpen_autoscale_decisions_total" {
			for _, m := range f.GetMetric() {
				decided += m.GetCounter().GetValue()
			}
		}
	}
	if decided != 1 {
		t.Fatalf("%v decisions counted, want the burst pool's first poll", decided)
	}
}
