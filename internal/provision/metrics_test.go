package provision

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The rejections' series is there, at zero, before the first rejection:
// an alert on its increase sees that one.
func TestRejectionsAreServedFromTheStart(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if _, err := newMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "bullpen_provision_jobs_total"); err != nil || n != 1 {
		t.Fatalf("%d series, %v; want the rejections' at zero", n, err)
	}
}
