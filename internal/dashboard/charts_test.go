package dashboard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestShortDuration(t *testing.T) {
	t.Parallel()
	cases := map[time.Duration]string{
		0: "0.0s", 4200 * time.Millisecond: "4.2s", 42 * time.Second: "42s", 185 * time.Second: "3m05s",
		2*time.Hour + 7*time.Minute: "2h07m", 76 * time.Hour: "3d4h", -90 * time.Second: "-1m30s",
	}
	for d, want := range cases {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// The week view covers every day from midnight to midnight, daylight
// saving changes included, on the pool's wall clock.
func TestWeekBandsCoverEveryDay(t *testing.T) {
	t.Parallel()
	paris, _ := time.LoadLocation("Europe/Paris")
	p := domain.Pool{Name: "p", Timezone: "Europe/Paris", Location: paris, Schedule: []domain.ScheduleEntry{
		{Name: "default", Hot: 1},
		{Name: "night", Match: &domain.Match{Window: &domain.Window{Start: 22 * 60, End: 6 * 60}}, Stopped: 2},
		{Name: "gap", Match: &domain.Match{Days: []time.Weekday{time.Sunday}, Window: &domain.Window{Start: 2*60 + 15, End: 2*60 + 45}}, Hot: 3},
	}}
	for _, day := range []time.Time{
		time.Date(2026, 3, 29, 0, 0, 0, 0, paris),  // spring forward: 02:00 → 03:00
		time.Date(2026, 10, 25, 0, 0, 0, 0, paris), // fall back: 03:00 → 02:00
		time.Date(2026, 11, 24, 0, 0, 0, 0, paris),
	} {
		bs := bands(p, day)
		if bs[0].from != 0 || bs[len(bs)-1].to != 24*60 {
			t.Errorf("%s: bands from %d to %d", day.Format("2006-01-02"), bs[0].from, bs[len(bs)-1].to)
		}
		for k := 1; k < len(bs); k++ {
			if bs[k].from != bs[k-1].to {
				t.Errorf("%s: gap between %v and %v", day.Format("2006-01-02"), bs[k-1], bs[k])
			}
		}
		if bs[0].entry != "night" || bs[len(bs)-1].entry != "night" {
			t.Errorf("%s: the night window is missing at an end: %v", day.Format("2006-01-02"), bs)
		}
	}
	c := weekChart(p, time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	if len(c.Lines) != 2 || len(c.Rects) != 7*3+2 { // three bands a day, and the Sunday gap entry splits Sunday twice more
		t.Errorf("week chart: %d lines, %d bands", len(c.Lines), len(c.Rects))
	}
}

// Charts stay the same size whatever the number of jobs: a bar per bucket
// and path.
func TestQueueChartStaysSmallAtTenThousandJobs(t *testing.T) {
	t.Parallel()
	by := map[string][]time.Duration{}
	for k := range 10_000 {
		p := paths[k%len(paths)]
		by[p] = append(by[p], time.Duration(k%400)*time.Second)
	}
	c := queueChart(by)
	if len(c.Rects) > len(paths)*len(queueBuckets) {
		t.Errorf("%d bars for 10,000 jobs", len(c.Rects))
	}
	if !strings.Contains(fmt.Sprint(c.Texts), "2000 jobs · p50") {
		t.Errorf("no per-path percentiles in %v", c.Texts)
	}
	if empty := queueChart(nil); empty.Empty == "" {
		t.Error("an empty chart says nothing")
	}
}

func TestHistoryChartAtFullSpan(t *testing.T) {
	t.Parallel()
	var h history
	insts := make([]domain.Instance, 1000)
	for k := range insts {
		insts[k].State = []domain.State{domain.StateReady, domain.StateStopped, domain.StateRunning, domain.StateBooting}[k%4]
	}
	now := t0
	for m := range 8 * 60 { // more than the span: the oldest fall off
		h.add(t0.Add(time.Duration(m-8*60)*time.Minute), insts)
	}
	samples := h.list()
	if len(samples) != int(historySpan.Minutes()) {
		t.Fatalf("%d samples kept, want %v", len(samples), historySpan.Minutes())
	}
	c := historyChart(samples, now)
	if len(c.Paths) != len(stateGroups) || len(c.Rects) != len(samples)+len(stateGroups) {
		t.Errorf("%d areas, %d rectangles: want one area per group, one column per minute and the legend", len(c.Paths), len(c.Rects))
	}
	if !strings.Contains(fmt.Sprint(c.Texts), "1000") {
		t.Error("the axis does not reach 1000")
	}
	h.add(now.Add(30*time.Second), insts[:10]) // same minute: replaces
	if got := h.list(); len(got) != len(samples) || got[len(got)-1].counts[domain.StateReady] != 3 {
		t.Errorf("a second sample in the same minute was not merged")
	}
}

func TestTimeline(t *testing.T) {
	t.Parallel()
	q := t0
	at := func(s int) time.Time { return q.Add(time.Duration(s) * time.Second) }
	cold := domain.Instance{ID: "bp-c", Role: domain.RoleOnDemand, CreatedAt: at(3), State: domain.StateTerminated,
		StateSince: at(90), Reason: "job finished"}
	cases := []struct {
		name string
		job  domain.Job
		in   *domain.Instance
		want string
	}{
		{"rejected", domain.Job{Status: domain.JobRejected, QueuedAt: at(0), CreatedAt: at(1), Reason: "no pool"},
			nil, "queued,routed"},
		{"waiting for approval", domain.Job{Status: domain.JobQueued, QueuedAt: at(0), CreatedAt: at(1), Reason: domain.ReasonWaitingForApproval},
			nil, "queued,routed"},
		{"cold start", domain.Job{ID: 7, Status: domain.JobCompleted, Route: domain.RouteLaunch, Via: domain.ViaCold,
			InstanceID: "bp-c", QueuedAt: at(0), CreatedAt: at(1), AssignedAt: at(2), StartedAt: at(40), CompletedAt: at(80)},
			&cold, "queued,routed,assigned,launched,started,finished,instance"},
		{"instance gone from the store", domain.Job{Status: domain.JobRunning, Via: domain.ViaPool, InstanceID: "bp-x",
			QueuedAt: at(0), CreatedAt: at(1), AssignedAt: at(2), StartedAt: at(3)}, nil, "queued,routed,assigned,started"},
	}
	for _, c := range cases {
		var kinds []string
		for _, e := range timeline(c.job, c.in) {
			kinds = append(kinds, e.Kind)
		}
		if got := strings.Join(kinds, ","); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	requeued := assigned(domain.Job{InstanceID: "bp-1", Via: domain.ViaPool, Attempts: 2, RunnerName: "r"})
	if !strings.Contains(requeued, "attempt 2 (earlier attempts are not kept)") {
		t.Errorf("assigned: %q", requeued)
	}
}
