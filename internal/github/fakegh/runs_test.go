package fakegh_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
)

// The created filter takes GitHub's forms for dates, and a filtered
// listing finds at most 1,000 runs, as GitHub's search does; an
// unfiltered one finds them all.
func TestRunsCreatedFilterAndSearchCap(t *testing.T) {
	srv := newServer(t)
	clk := clock.NewVirtual(epoch)
	srv.SetClock(clk)
	for range 1500 {
		srv.QueueJob("acme/app", []string{"x"})
		clk.Advance(time.Second)
	}
	at := func(s int) string { return epoch.Add(time.Duration(s) * time.Second).Format(time.RFC3339) }
	tests := []struct {
		created string
		want    float64
	}{
		{"", 1500},
		{">=" + at(0), 1000},
		{at(100) + ".." + at(199), 100},
		{at(100) + "..*", 1000},
		{"*.." + at(9), 10},
		{">" + at(1489), 10},
		{"<" + at(10), 10},
		{"<=" + at(10), 11},
		{"2025-03-03.." + at(4), 5},
		{"..", -1},
		{"yesterday", -1},
	}
	for _, tc := range tests {
		a := do(t, srv, "GET", "/repos/acme/app/actions/runs?per_page=1&created="+url.QueryEscape(tc.created), "", "")
		if tc.want < 0 {
			if a.status != 422 {
				t.Errorf("created=%s: %d, want 422", tc.created, a.status)
			}
			continue
		}
		if got := a.json(t)["total_count"]; got != tc.want {
			t.Errorf("created=%s: total_count %v, want %v", tc.created, got, tc.want)
		}
	}
	capped := do(t, srv, "GET", "/repos/acme/app/actions/runs?per_page=100&page=11&status=queued", "", "")
	if runs := capped.json(t)["workflow_runs"].([]any); len(runs) != 0 {
		t.Errorf("page 11 of a listing by status: %d runs, want none past the 1,000th", len(runs))
	}
}
