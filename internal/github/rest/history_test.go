package rest_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
)

// queueRuns queues n runs in repo, every runs apart on clk, and returns
// their ids in the order they were created.
func queueRuns(srv *fakegh.Server, clk *clock.Virtual, n int, every time.Duration) []int64 {
	var ids []int64
	for range n {
		ids = append(ids, srv.QueueJob(repo, []string{"x"}).RunID)
		clk.Advance(every)
	}
	return ids
}

// A busy repository's window holds more runs than GitHub finds for one
// search (1,000), some of them in bursts: every run is listed all the
// same, newest first, once; those before the window are not.
func TestRunsSinceReadsPastTheSearchCap(t *testing.T) {
	srv := newServer(t)
	clk := clock.NewVirtual(epoch)
	srv.SetClock(clk)
	queueRuns(srv, clk, 5, time.Minute)
	since := clk.Now()
	want := queueRuns(srv, clk, 300, 3*time.Second)
	want = append(want, queueRuns(srv, clk, 750, 0)...) // in one second
	clk.Advance(time.Second)
	want = append(want, queueRuns(srv, clk, 100, time.Minute)...)
	slices.Reverse(want)

	got, err := newClient(t, srv).RunsSince(t.Context(), repo, since)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("RunsSince listed %d runs, want all %d, newest first", len(got), len(want))
	}
	if n := srv.Count("GET /repos/{owner}/{repo}/actions/runs"); n > 25 {
		t.Errorf("%d requests for 1,150 runs", n)
	}
}

// GitHub cannot list 1,000 runs created in one second: that is an error,
// not a list missing some.
func TestRunsSinceRefusesToMissRuns(t *testing.T) {
	srv := newServer(t)
	clk := clock.NewVirtual(epoch)
	srv.SetClock(clk)
	queueRuns(srv, clk, 1000, 0)
	_, err := newClient(t, srv).RunsSince(t.Context(), repo, epoch)
	if err == nil || !strings.Contains(err.Error(), "1000 runs or more created at 2025-03-03T09:00:00Z") {
		t.Errorf("1,000 runs in one second: %v, want an error saying so", err)
	}
}
