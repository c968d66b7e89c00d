package autoscale

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func poolWith(spec domain.AutoscaleSpec) domain.Pool {
	return domain.Pool{Name: "p", Autoscale: &spec}
}

// morning is when the pool scaler's tests start polling, unless they need
// an evening.
var morning = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

// pollingParams are the defaults with a pool's bounds and poll interval.
func pollingParams(minInstances, maxInstances int, poll time.Duration) Params {
	p := DefaultParams()
	p.MinInstances, p.MaxInstances, p.PollInterval = minInstances, maxInstances, poll
	return p
}

// scalerOf is a pool scaler whose demand is *demand, logging nowhere.
func scalerOf(demand *int) *PoolScaler {
	return &PoolScaler{
		Demand: func(context.Context, string) (int, error) { return *demand, nil },
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func TestPoolScalerFollowsDemandBetweenTheScheduleAndMax(t *testing.T) {
	demand, fail := 0, error(nil)
	s, _, _ := scalerOn(t, &demand, &fail)
	p := poolWith(SpecOf(pollingParams(0, 4, 30*time.Second)))
	sched := domain.Target{Hot: 1, Stopped: 2}
	step := func(i int, d int) domain.Target {
		demand = d
		_, got := s.Adjust(context.Background(), p, morning.Add(time.Duration(i)*30*time.Second), "default", sched)
		return got
	}
	if got := step(0, 0); got.Hot != 1 || got.Stopped != 2 {
		t.Fatalf("no demand: %+v (the schedule is the floor)", got)
	}
	// Sustained demand of 6 against one hot instance: up breaches; two in a
	// row scale (default threshold 1.5, half-life 120 s).
	hot := []int{}
	for i := 1; i <= 6; i++ {
		hot = append(hot, step(i, 6).Hot)
	}
	if hot[0] != 1 || hot[len(hot)-1] != 4 {
		t.Fatalf("hot under sustained demand: %v (want from 1 up to the max of 4)", hot)
	}
	for i, h := range hot[1:] {
		if h < hot[i] {
			t.Fatalf("hot went down under demand: %v", hot)
		}
	}
	// Demand gone: it comes back down, never below the schedule's hot.
	var last int
	for i := 7; i <= 60; i++ {
		last = step(i, 0).Hot
		if last < 1 {
			t.Fatalf("hot fell below the schedule's: %d", last)
		}
	}
	if last != 1 {
		t.Fatalf("hot after demand went away: %d, want the schedule's 1", last)
	}
	// A demand read that fails changes nothing.
	fail = errors.New("store down")
	if got := step(61, 100).Hot; got != 1 {
		t.Fatalf("scaled on an unknown demand: %d", got)
	}
	if d, ok := s.Last("p", time.Time{}); !ok || d.Action != ActionNone {
		t.Fatalf("last decision %+v %v", d, ok)
	}
}

func TestPoolScalerDecidesOncePerPollInterval(t *testing.T) {
	calls := 0
	s := &PoolScaler{
		Demand: func(context.Context, string) (int, error) { calls++; return 0, nil },
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	p := poolWith(SpecOf(pollingParams(0, 10, time.Minute)))
	for i := range 4 { // converger cycles 30 s apart
		s.Adjust(context.Background(), p, morning.Add(time.Duration(i)*30*time.Second), "default", domain.Target{})
	}
	if calls != 2 {
		t.Fatalf("demand read %d times in 4 cycles of 30 s with a 60 s poll", calls)
	}
}

func TestPoolWithoutABlockKeepsItsSchedule(t *testing.T) {
	s := &PoolScaler{Demand: func(context.Context, string) (int, error) { t.Fatal("demand read"); return 0, nil }}
	if e, got := s.Adjust(context.Background(), domain.Pool{Name: "p"}, time.Now(), "nights", domain.Target{Hot: 2}); e != "nights" || got.Hot != 2 {
		t.Fatalf("%s %+v", e, got)
	}
}

func TestSpecRoundTrip(t *testing.T) {
	p := DefaultParams()
	if ParamsOf(SpecOf(p)) != p {
		t.Fatal("ParamsOf(SpecOf(p)) != p")
	}
}

// scalerOn is a pool scaler whose demand is *demand, or *fail when set,
// with its metrics on a registry of its own.
func scalerOn(t *testing.T, demand *int, fail *error) (*PoolScaler, *prometheus.Registry, *PoolMetrics) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := NewPoolMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return &PoolScaler{
		Demand:  func(context.Context, string) (int, error) { return *demand, *fail },
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: m,
	}, reg, m
}

func TestPoolScalerCountsItsDecisionsByPool(t *testing.T) {
	demand, fail := 6, error(nil)
	s, reg, m := scalerOn(t, &demand, &fail)
	p := poolWith(SpecOf(pollingParams(0, 4, 30*time.Second)))
	var actions []string
	for i := range 4 {
		s.Adjust(context.Background(), p, morning.Add(time.Duration(i)*30*time.Second), "default", domain.Target{Hot: 1})
		d, _ := s.Last("p", time.Time{})
		actions = append(actions, d.Action)
	}
	fail = errors.New("store down")
	s.Adjust(context.Background(), p, morning.Add(4*30*time.Second), "default", domain.Target{Hot: 1})

	want := map[string]float64{}
	for _, a := range actions {
		want[a]++
	}
	for _, a := range []string{ActionUp, ActionDown, ActionNone} {
		if got := testutil.ToFloat64(m.decisions.WithLabelValues("p", a)); got != want[a] {
			t.Errorf("decisions{action=%q} = %v, want %v (decisions %v)", a, got, want[a], actions)
		}
	}
	if want[ActionUp] == 0 {
		t.Fatalf("no scale-up under sustained demand: %v", actions)
	}
	if got := testutil.ToFloat64(m.skipped.WithLabelValues("p")); got != 1 {
		t.Errorf("skipped polls = %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(reg, "bullpen_autoscale_decisions_total", "bullpen_autoscale_skipped_polls_total"); err != nil || n != 4 {
		t.Errorf("%d series (%v), want 4: three actions and the skipped polls of the one pool", n, err)
	}
}

// recordedStatus is a converger's last record of pool p, as another
// replica left it.
func recordedStatus(entry string, hot int, at time.Time) func(context.Context, string) (domain.PoolStatus, bool, error) {
	return func(_ context.Context, pool string) (domain.PoolStatus, bool, error) {
		if pool != "p" {
			return domain.PoolStatus{}, false, nil
		}
		return domain.PoolStatus{Name: pool, Schedule: entry, Target: domain.Target{Hot: hot}, LastCycle: at}, true, nil
	}
}

// A replica that takes a pool over in the middle of a burst resumes from
// the count the autoscaler had reached, not from the schedule: the
// converger would terminate the burst's hot instances as excess.
func TestPoolScalerResumesFromTheRecordedCount(t *testing.T) {
	params := pollingParams(0, 10, 30*time.Second)
	sched := domain.Target{Hot: 1}
	cases := []struct {
		name     string
		recorded func(context.Context, string) (domain.PoolStatus, bool, error)
		want     int
	}{
		{"raised by the autoscaler", recordedStatus("default+autoscale", 8, morning.Add(-time.Minute)), 8},
		{"at its schedule", recordedStatus("default", 3, morning.Add(-time.Minute)), 1},
		{"recorded long ago", recordedStatus("default+autoscale", 8, morning.Add(-time.Hour)), 1},
		{"none recorded", func(context.Context, string) (domain.PoolStatus, bool, error) { return domain.PoolStatus{}, false, nil }, 1},
		{"unreadable", func(context.Context, string) (domain.PoolStatus, bool, error) {
			return domain.PoolStatus{}, false, errors.New("store down")
		}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			demand := 8
			s := scalerOf(&demand)
			s.Recorded, s.StaleAfter = c.recorded, 2*time.Minute
			if _, got := s.Adjust(context.Background(), poolWith(SpecOf(params)), morning, "default", sched); got.Hot != c.want {
				t.Fatalf("hot %d on the first cycle, want %d", got.Hot, c.want)
			}
		})
	}
}

// A replica that converges a pool again after another did for a day drops
// its old state: it does not resume from a burst long over and shed it one
// step per cooldown.
func TestPoolScalerDropsAStateLeftUnused(t *testing.T) {
	params := pollingParams(0, 4, 30*time.Second)
	demand := 6
	s := scalerOf(&demand)
	s.StaleAfter = 2 * time.Minute
	p, sched := poolWith(SpecOf(params)), domain.Target{Hot: 1}
	var hot int
	for i := range 8 {
		_, got := s.Adjust(context.Background(), p, morning.Add(time.Duration(i)*30*time.Second), "default", sched)
		hot = got.Hot
	}
	if hot != 4 {
		t.Fatalf("hot %d under sustained demand, want the max of 4", hot)
	}
	later := morning.Add(24 * time.Hour)
	s.Recorded, demand = recordedStatus("default", 1, later.Add(-30*time.Second)), 0
	if _, got := s.Adjust(context.Background(), p, later, "default", sched); got.Hot != 1 {
		t.Fatalf("hot %d a day later with no demand, want the schedule's 1", got.Hot)
	}
}

// The schedule is a floor under the autoscaler's count, not where the
// count starts: a replica that starts converging a pool while its schedule
// holds 6 hot must come down to what demand needs once the schedule drops,
// exactly as one that had been running since before the schedule rose.
func TestPoolScalerStartsFromMinNotFromTheSchedule(t *testing.T) {
	params := pollingParams(0, 10, time.Minute)
	businessHours := func(at time.Time) domain.Target {
		if at.Hour() >= 9 && at.Hour() < 18 {
			return domain.Target{Hot: 6}
		}
		return domain.Target{}
	}
	demand := 3
	day := func(h int) time.Time { return time.Date(2026, 11, 23, h, 0, 0, 0, time.UTC) }
	// hotAfterHours converges the pool every 30 s from start to 19:00 under
	// a constant demand of 3 and returns the hot target then.
	hotAfterHours := func(start time.Time) (hot int, entry string) {
		s := scalerOf(&demand)
		p := poolWith(SpecOf(params))
		for at := start; !at.After(day(19)); at = at.Add(30 * time.Second) {
			sched := "nights"
			if businessHours(at).Hot > 0 {
				sched = "business-hours"
			}
			e, got := s.Adjust(context.Background(), p, at, sched, businessHours(at))
			hot, entry = got.Hot, e
		}
		return hot, entry
	}
	early, earlyEntry := hotAfterHours(day(8))
	restarted, restartedEntry := hotAfterHours(day(10))
	// Demand 3 on one runner per instance: 2 instances hold it (3 is not
	// above 2 × 1.5), 1 does not.
	if early != 2 || earlyEntry != "nights"+RaisedSuffix {
		t.Fatalf("running since 08:00: hot %d (%s) at 19:00, want 2 (nights%s)", early, earlyEntry, RaisedSuffix)
	}
	if restarted != early || restartedEntry != earlyEntry {
		t.Fatalf("restarted at 10:00: hot %d (%s) at 19:00; one running since 08:00 holds %d (%s) on the same demand",
			restarted, restartedEntry, early, earlyEntry)
	}
	// During business hours the schedule stays the floor.
	s := scalerOf(&demand)
	if _, got := s.Adjust(context.Background(), poolWith(SpecOf(params)), day(10), "business-hours", businessHours(day(10))); got.Hot != 6 {
		t.Fatalf("hot %d at 10:00, want the schedule's 6", got.Hot)
	}
}

// The autoscaler decides from what the pool holds, the schedule's hot value
// at least. A pool whose own count is below its schedule's floor scales up
// as soon as one whose count is at the floor: its first scale-ups are not
// spent climbing to the floor, changing nothing, while jobs wait.
func TestPoolScalerScalesUpFromTheSchedulesHotValue(t *testing.T) {
	sched := domain.Target{Hot: 1}
	// pollsBeforeRaise runs quiet polls, then polls with a demand of 2, and
	// returns how many of those came before the hot target rose.
	pollsBeforeRaise := func(minInstances, quiet int) int {
		params := pollingParams(minInstances, 5, 30*time.Second)
		demand := 0
		s := scalerOf(&demand)
		p := poolWith(SpecOf(params))
		at := morning
		for range quiet {
			if _, got := s.Adjust(context.Background(), p, at, "default", sched); got.Hot != 1 {
				t.Fatalf("hot %d without demand, want the schedule's 1", got.Hot)
			}
			at = at.Add(params.PollInterval)
		}
		demand = 2
		for polls := range 10 {
			if _, got := s.Adjust(context.Background(), p, at, "default", sched); got.Hot > 1 {
				return polls
			}
			at = at.Add(params.PollInterval)
		}
		t.Fatalf("min %d, %d quiet polls: a demand of 2 never raised the hot target", minInstances, quiet)
		return 0
	}
	atFloor := pollsBeforeRaise(1, 1)
	if atFloor != 1 {
		t.Fatalf("a count at the floor: the hot target rose after %d polls with demand, want 1 (two breaches)", atFloor)
	}
	for _, quiet := range []int{1, 20} {
		if got := pollsBeforeRaise(0, quiet); got != atFloor {
			t.Errorf("a count below the floor, %d quiet polls: the hot target rose after %d polls with demand; at the floor, after %d",
				quiet, got, atFloor)
		}
	}
}

// A burst over, the autoscaler comes back down to the schedule's hot value
// and stops there: a scale-down below it would change nothing, and is
// neither logged nor counted as one.
func TestPoolScalerScalesDownToTheSchedulesHotValueOnly(t *testing.T) {
	params := pollingParams(0, 5, 30*time.Second)
	m, err := NewPoolMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	demand := 6
	s := &PoolScaler{
		Demand:  func(context.Context, string) (int, error) { return demand, nil },
		Log:     slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Metrics: m,
	}
	p, sched := poolWith(SpecOf(params)), domain.Target{Hot: 1}
	hot := []int{}
	for i := range 80 {
		if i == 8 {
			demand = 0
		}
		_, got := s.Adjust(context.Background(), p, morning.Add(time.Duration(i)*params.PollInterval), "default", sched)
		if len(hot) == 0 || got.Hot != hot[len(hot)-1] {
			hot = append(hot, got.Hot)
		}
	}
	if len(hot) < 3 || hot[0] != 1 || hot[len(hot)-1] != 1 {
		t.Fatalf("hot targets %v, want up from the schedule's 1 and back", hot)
	}
	rises, falls := 0, 0
	for i := 1; i < len(hot); i++ {
		if hot[i] > hot[i-1] {
			rises++
		} else {
			falls++
		}
	}
	ups, downs := testutil.ToFloat64(m.decisions.WithLabelValues("p", ActionUp)), testutil.ToFloat64(m.decisions.WithLabelValues("p", ActionDown))
	if ups != float64(rises) || downs != float64(falls) {
		t.Errorf("hot targets %v: %v up and %v down decisions counted, want %d and %d", hot, ups, downs, rises, falls)
	}
	if n := strings.Count(log.String(), "action=down"); n != falls {
		t.Errorf("hot targets %v: %d scale-downs logged, want %d:\n%s", hot, n, falls, log.String())
	}
	if d, _ := s.Last("p", time.Time{}); d.Action != ActionNone || d.New != 1 || !strings.Contains(d.Reason, "already at the schedule's hot value 1") {
		t.Errorf("last decision %+v, want none at the schedule's 1", d)
	}
}

// When the schedule's hot value drops, the pool drops with it to what the
// autoscaler raised above the schedule, if anything: the schedule's count is
// not carried into the evening.
func TestPoolScalerFollowsTheScheduleDown(t *testing.T) {
	params := pollingParams(0, 10, 30*time.Second)
	demand := 0
	s := scalerOf(&demand)
	p := poolWith(SpecOf(params))
	at := time.Date(2026, 11, 23, 17, 50, 0, 0, time.UTC)
	for range 10 {
		if _, got := s.Adjust(context.Background(), p, at, "business-hours", domain.Target{Hot: 6}); got.Hot != 6 {
			t.Fatalf("hot %d by day, want the schedule's 6", got.Hot)
		}
		at = at.Add(params.PollInterval)
	}
	if e, got := s.Adjust(context.Background(), p, at, "nights", domain.Target{}); got.Hot != 0 || e != "nights" {
		t.Fatalf("at the first cycle of the night without demand: hot %d (%s), want 0 (nights)", got.Hot, e)
	}
	// A burst raises the pool above its daytime floor; the night keeps
	// what the autoscaler raised, not the floor.
	at = at.Add(params.PollInterval)
	demand = 12
	var hot int
	for range 4 {
		_, got := s.Adjust(context.Background(), p, at, "business-hours", domain.Target{Hot: 6})
		hot = got.Hot
		at = at.Add(params.PollInterval)
	}
	if hot <= 6 {
		t.Fatalf("hot %d under a demand of 12 on a floor of 6, want it raised", hot)
	}
	if e, got := s.Adjust(context.Background(), p, at, "nights", domain.Target{}); got.Hot != hot || e != "nights"+RaisedSuffix {
		t.Fatalf("the first cycle of the night after a burst: hot %d (%s), want the raised %d (nights%s)", got.Hot, e, hot, RaisedSuffix)
	}
}

// When the schedule's hot value drops under unchanged demand, the pool keeps
// the instances that demand needs: terminating them and creating them again
// on the next up breaches would boot machines for nothing, past the step
// caps and the down cooldown. What demand does not need goes at once; the
// rest goes by scale-downs once demand falls.
func TestPoolScalerKeepsWhatDemandNeedsWhenTheScheduleDrops(t *testing.T) {
	params := pollingParams(0, 10, 30*time.Second)
	demand := 6
	s := scalerOf(&demand)
	p := poolWith(SpecOf(params))
	at := time.Date(2026, 11, 23, 17, 50, 0, 0, time.UTC)
	poll := func(entry string, hot int) int {
		_, got := s.Adjust(context.Background(), p, at, entry, domain.Target{Hot: hot})
		if d, _ := s.Last("p", time.Time{}); d.Action == ActionUp {
			t.Fatalf("%s: scaled up under a demand that did not change: %s", at.Format("15:04:05"), d.Reason)
		}
		at = at.Add(params.PollInterval)
		return got.Hot
	}
	for range 20 {
		if hot := poll("business-hours", 5); hot != 5 {
			t.Fatalf("hot %d by day, want the schedule's 5", hot)
		}
	}
	// 4 instances hold a demand of 6 (6 is not above 4 × 1.5); 3 do not.
	for i := range 20 {
		if hot := poll("nights", 1); hot != 4 {
			t.Fatalf("poll %d of the night under a demand of 6: hot %d, want 4", i, hot)
		}
	}
	demand = 0
	hot, lastFall := 4, time.Time{}
	for range 60 {
		fell := at
		got := poll("nights", 1)
		switch {
		case got > hot:
			t.Fatalf("%s: hot rose from %d to %d without demand", fell.Format("15:04:05"), hot, got)
		case got < hot-params.ScaleDownStep:
			t.Fatalf("%s: hot fell from %d to %d, more than a step of %d", fell.Format("15:04:05"), hot, got, params.ScaleDownStep)
		case got < hot && !lastFall.IsZero() && fell.Sub(lastFall) < params.ScaleDownCooldown:
			t.Fatalf("%s: hot fell to %d %v after the last fall, inside the down cooldown", fell.Format("15:04:05"), got, fell.Sub(lastFall))
		case got < hot:
			lastFall = fell
		}
		hot = got
	}
	if hot != 1 {
		t.Fatalf("hot %d long after demand went away, want the schedule's 1", hot)
	}
}

// Each pool's demand and breach scores at its last poll are served, so that
// a pool that does not scale shows why: a demand inside the hysteresis band,
// or a score short of the threshold.
func TestPoolScalerServesDemandAndBreachScores(t *testing.T) {
	params := pollingParams(0, 4, 30*time.Second)
	demand, fail := 6, error(nil)
	s, reg, m := scalerOn(t, &demand, &fail)
	p := poolWith(SpecOf(params))
	fail = errors.New("store down")
	s.Adjust(context.Background(), p, morning, "default", domain.Target{Hot: 1})
	if n, err := testutil.GatherAndCount(reg, "bullpen_autoscale_demand", "bullpen_autoscale_breach_score"); err != nil || n != 0 {
		t.Fatalf("%d demand and score series (%v) before any demand was read, want none", n, err)
	}
	fail = nil
	gauges := func() (demand, up, down float64) {
		return testutil.ToFloat64(m.demand.WithLabelValues("p")),
			testutil.ToFloat64(m.score.WithLabelValues("p", ActionUp)), testutil.ToFloat64(m.score.WithLabelValues("p", ActionDown))
	}
	// 6 jobs on the schedule's one instance: an up breach, short of 1.5.
	s.Adjust(context.Background(), p, morning.Add(30*time.Second), "default", domain.Target{Hot: 1})
	if d, up, down := gauges(); d != 6 || up != 1 || down != 0 {
		t.Fatalf("after one up breach: demand %v, scores up %v down %v; want 6, 1 and 0", d, up, down)
	}
	// The demand gone: a down breach, and the up breach's weight decays.
	demand = 0
	s.Adjust(context.Background(), p, morning.Add(time.Minute), "default", domain.Target{Hot: 1})
	last, _ := s.Last("p", time.Time{})
	wantUp := score([]time.Time{morning.Add(30 * time.Second)}, morning.Add(time.Minute), params.DecayHalfLife)
	if d, up, down := gauges(); d != 0 || up != wantUp || down != last.Score || down != 1 {
		t.Fatalf("after a down breach: demand %v, scores up %v down %v; want 0, %v and the decision's %v", d, up, down, wantUp, last.Score)
	}
	// A demand read that fails leaves what the last read showed.
	fail = errors.New("store down")
	s.Adjust(context.Background(), p, morning.Add(90*time.Second), "default", domain.Target{Hot: 1})
	if d, _, down := gauges(); d != 0 || down != 1 {
		t.Fatalf("after a failed read: demand %v, down score %v; want the last poll's 0 and 1", d, down)
	}
}

// A pool held at its max while demand asks for more says so at INFO once,
// as the bound starts to hold, not at every poll; the next time it starts
// to hold, it says so again.
func TestPoolScalerLogsOnceThatItIsHeldAtItsMax(t *testing.T) {
	params := pollingParams(0, 2, 30*time.Second)
	var log bytes.Buffer
	demand := 10
	s := &PoolScaler{
		Demand: func(context.Context, string) (int, error) { return demand, nil },
		Log:    slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	p := poolWith(SpecOf(params))
	at := morning
	polls := func(n int) {
		for range n {
			s.Adjust(context.Background(), p, at, "default", domain.Target{})
			at = at.Add(params.PollInterval)
		}
	}
	const atMax = "already at MAX_INSTANCES=2"
	polls(20)
	if d, _ := s.Last("p", time.Time{}); !d.Capped || !strings.Contains(d.Reason, atMax) {
		t.Fatalf("last decision %+v under a demand of 10, want held at the max of 2", d)
	}
	if n := strings.Count(log.String(), atMax); n != 1 {
		t.Fatalf("%q logged %d times at INFO over 20 polls at the max, want once:\n%s", atMax, n, log.String())
	}
	demand = 2 // 2 on 2 instances: stable
	polls(2)
	if d, _ := s.Last("p", time.Time{}); d.Capped {
		t.Fatalf("last decision %+v on a demand of 2, want it no longer held at the max", d)
	}
	demand = 10
	polls(10)
	if n := strings.Count(log.String(), atMax); n != 2 {
		t.Fatalf("%q logged %d times at INFO over two spells at the max, want once each:\n%s", atMax, n, log.String())
	}
}

// A pool removed from the configuration, or whose block was, leaves no
// series behind and no state to resume if it comes back.
func TestPoolScalerForgetsPoolsItNoLongerScales(t *testing.T) {
	params := pollingParams(0, 4, 30*time.Second)
	demand, fail := 6, error(nil)
	s, reg, m := scalerOn(t, &demand, &fail)
	spec := SpecOf(params)
	pools := []domain.Pool{{Name: "kept", Autoscale: &spec}, {Name: "removed", Autoscale: &spec}, {Name: "unblocked", Autoscale: &spec}}
	var hot int
	for i := range 6 {
		for _, p := range pools {
			_, got := s.Adjust(context.Background(), p, morning.Add(time.Duration(i)*30*time.Second), "default", domain.Target{Hot: 1})
			hot = got.Hot
		}
	}
	if hot != 4 {
		t.Fatalf("hot %d under a demand of 6, want the max of 4", hot)
	}
	// The pools' series: 3 actions, skipped polls, demand, 2 scores.
	const perPool = 7
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 3*perPool {
		t.Fatalf("%d series (%v) for 3 pools, want %d", n, err, 3*perPool)
	}
	at := morning.Add(6 * 30 * time.Second)
	unblocked := domain.Pool{Name: "unblocked"}
	if _, got := s.Adjust(context.Background(), unblocked, at, "default", domain.Target{Hot: 1}); got.Hot != 1 {
		t.Fatalf("hot %d without a block, want the schedule's 1", got.Hot)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 2*perPool {
		t.Fatalf("%d series (%v) once a pool's block is removed, want the other two pools' %d", n, err, 2*perPool)
	}
	s.Retain([]domain.Pool{pools[0], unblocked})
	if n, err := testutil.GatherAndCount(reg); err != nil || n != perPool {
		t.Fatalf("%d series (%v) once only one pool is scaled, want its %d", n, err, perPool)
	}
	if got := testutil.ToFloat64(m.demand.WithLabelValues("kept")); got != 6 {
		t.Errorf("the kept pool's demand %v, want 6", got)
	}
	for _, name := range []string{"removed", "unblocked"} {
		if d, ok := s.Last(name, time.Time{}); ok {
			t.Errorf("pool %s's last decision kept: %+v", name, d)
		}
	}
	if d, ok := s.Last("kept", time.Time{}); !ok || d.New != 4 {
		t.Errorf("the kept pool's last decision %+v %v, want its count of 4", d, ok)
	}
	// Back in the configuration, a pool starts afresh from its min: what
	// it held before it left is not resumed.
	if _, got := s.Adjust(context.Background(), pools[1], at, "default", domain.Target{Hot: 1}); got.Hot != 1 {
		t.Fatalf("hot %d for a pool back in the configuration, want the schedule's 1", got.Hot)
	}
}

// The demand is read under the converger cycle's context: a cycle that
// ends meanwhile (a stop, a lease lost) cuts the read short, and that poll
// is neither counted as skipped nor warned about, since the store did not
// fail; the next cycle polls.
func TestPoolScalerReadsUnderTheCyclesContext(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewPoolMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s := &PoolScaler{
		Demand: func(ctx context.Context, _ string) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		},
		Log:     slog.New(slog.NewTextHandler(&logs, nil)),
		Metrics: m,
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.Adjust(ctx, poolWith(SpecOf(DefaultParams())), morning, "default", domain.Target{Hot: 1})
	if got := testutil.ToFloat64(m.skipped.WithLabelValues("p")); got != 0 || strings.Contains(logs.String(), "WARN") {
		t.Fatalf("a poll cut short by its cycle's end: %v skipped, logs %q; want none", got, logs.String())
	}
}

// A replica that no longer converges a pool (another took its lease) does
// not show its last decision, perhaps hours old, as the pool's.
func TestALastDecisionGoesStaleWithTheReplicasState(t *testing.T) {
	demand, fail := 0, error(nil)
	s, _, _ := scalerOn(t, &demand, &fail)
	s.StaleAfter = 3 * time.Minute
	at := morning
	s.Adjust(context.Background(), poolWith(SpecOf(DefaultParams())), at, "default", domain.Target{Hot: 1})
	if _, ok := s.Last("p", at.Add(3*time.Minute)); !ok {
		t.Fatal("the decision of a replica that scales the pool is not shown")
	}
	if d, ok := s.Last("p", at.Add(3*time.Minute+time.Second)); ok {
		t.Fatalf("a decision left unused past StaleAfter is shown: %+v", d)
	}
}
