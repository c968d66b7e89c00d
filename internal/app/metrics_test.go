package app_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/app"
)

// What the terminator does, and the cloud calls it fails, are served on
// /metrics from the start, at zero until something happens.
func TestTheTerminatorsMetricsAreServed(t *testing.T) {
	a := newApp(t, app.Options{})
	const want = 3 // kind="expired", kind="terminated", op="terminate"
	n, err := testutil.GatherAndCount(a.Registry(), "bullpen_terminator_actions_total", "bullpen_terminator_cloud_errors_total")
	if err != nil || n != want {
		t.Fatalf("%d terminator series served, %v; want %d", n, err, want)
	}
}
