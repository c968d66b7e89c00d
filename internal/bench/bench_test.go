package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
)

// TestRunSmall runs both bursts at a small size: the figures are not checked
// here (performance lives in `bullpen bench`), only that the run completes
// with every job assigned exactly once and the batching rules kept.
func TestRunSmall(t *testing.T) {
	res, err := Run(context.Background(), Options{Jobs: 120, CASOps: 200, Timeout: time.Minute, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.StoreCASPerSecond <= 0 {
		t.Fatalf("no store rate: %+v", res)
	}
	for name, s := range res.Scenarios {
		if s.Jobs != 120 || s.DoubleAssignments != 0 {
			t.Fatalf("%s: %+v", name, s)
		}
	}
	pool := res.Scenarios["pool_burst"]
	if pool.InstancesStarted != 120 || pool.APICalls["StartInstances"] < 3 {
		t.Fatalf("pool burst: %+v", pool)
	}
	cold := res.Scenarios["cold_burst"]
	if cold.InstancesCreated != 120 || cold.APICalls["StartInstances"] != 0 {
		t.Fatalf("cold burst: %+v", cold)
	}
}

func TestMain(m *testing.M) { os.Exit(mototest.Main(m)) }

func TestBurstsLargerThanAPoolAreRefused(t *testing.T) {
	if _, err := Run(context.Background(), Options{Jobs: 10_001, Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "at most 10000 jobs a burst") {
		t.Fatalf("got %v", err)
	}
}

func TestAnUnknownScenarioIsRefusedNamingTheKnownOnes(t *testing.T) {
	_, err := Run(context.Background(), Options{Jobs: 10, Only: "pool-burst", Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), `no scenario "pool-burst": the scenarios are pool_burst and cold_burst`) {
		t.Fatalf("got %v", err)
	}
}
