package schedule_test

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/schedule"
)

func TestNextChange(t *testing.T) {
	paris := mustZone("Europe/Paris")
	newYork := mustZone("America/New_York")
	seed := seedPool(paris)
	sundayOnly := func(loc *time.Location, w *domain.Window) domain.Pool {
		return onOff(loc, domain.Match{Days: days(time.Sunday), Window: w})
	}
	defaultOnly := domain.Pool{Location: paris, Schedule: []domain.ScheduleEntry{{Name: "always", Hot: 1}}}
	sameTargets := domain.Pool{Location: paris, Schedule: []domain.ScheduleEntry{
		{Name: "day", Hot: 1},
		{Name: "night", Hot: 1, Match: &domain.Match{Window: window("22:00", "06:00")}},
	}}
	const week = 7 * 24 * time.Hour

	tests := []struct {
		name    string
		pool    domain.Pool
		from    string
		horizon time.Duration
		want    string // "" when no change within the horizon
	}{
		{"monday noon: nights begin at 22:00", seed, "Mon 2026-11-23 12:00 +01:00", week, "Mon 2026-11-23 22:00 +01:00"},
		{"at a boundary the next one is found, not the current", seed, "Mon 2026-11-23 22:00 +01:00", week, "Tue 2026-11-24 06:00 +01:00"},
		{"between seconds: the change is on the minute", seed, "Mon 2026-11-23 21:59:30 +01:00", week, "Mon 2026-11-23 22:00 +01:00"},
		{"friday night: weekends take over at midnight", seed, "Fri 2026-11-20 23:00 +01:00", week, "Sat 2026-11-21 00:00 +01:00"},
		{"saturday: nights inside weekends change nothing until monday midnight", seed, "Sat 2026-11-21 12:00 +01:00", week, "Mon 2026-11-23 00:00 +01:00"},
		{"monday's early hours: the default returns at 06:00", seed, "Mon 2026-11-23 00:00 +01:00", week, "Mon 2026-11-23 06:00 +01:00"},
		{"a horizon ending just before the change sees none", seed, "Mon 2026-11-23 12:00 +01:00", 10*time.Hour - time.Second, ""},
		{"a horizon ending on the change includes it", seed, "Mon 2026-11-23 12:00 +01:00", 10 * time.Hour, "Mon 2026-11-23 22:00 +01:00"},
		{"a zero horizon sees nothing", seed, "Mon 2026-11-23 21:59 +01:00", 0, ""},
		{"a default alone never changes", defaultOnly, "Mon 2026-11-23 12:00 +01:00", 60 * 24 * time.Hour, ""},
		{"a new entry name with equal targets is a change", sameTargets, "Mon 2026-11-23 12:00 +01:00", week, "Mon 2026-11-23 22:00 +01:00"},

		{"paris spring forward: 02:30-04:00 opens at the jump, not at a window edge", sundayOnly(paris, window("02:30", "04:00")), "Sat 2026-03-28 12:00 +01:00", week, "Sun 2026-03-29 03:00 +02:00"},
		{"paris spring forward: 01:00-03:00 closes one real hour after it opens", sundayOnly(paris, window("01:00", "03:00")), "Sun 2026-03-29 01:00 +01:00", week, "Sun 2026-03-29 03:00 +02:00"},
		{"paris spring forward: 02:00-03:00 is skipped, so the next change is a week on", sundayOnly(paris, window("02:00", "03:00")), "Sat 2026-03-28 12:00 +01:00", week + 24*time.Hour, "Sun 2026-04-05 02:00 +02:00"},
		{"paris fall back: 02:00-03:00 runs through both 02:30s", sundayOnly(paris, window("02:00", "03:00")), "Sun 2026-10-25 02:30 +02:00", week, "Sun 2026-10-25 03:00 +01:00"},
		{"paris fall back: 02:00-02:30 closes at the first 02:30", sundayOnly(paris, window("02:00", "02:30")), "Sun 2026-10-25 02:10 +02:00", week, "Sun 2026-10-25 02:30 +02:00"},
		{"paris fall back: 02:00-02:30 reopens when the clocks go back", sundayOnly(paris, window("02:00", "02:30")), "Sun 2026-10-25 02:45 +02:00", week, "Sun 2026-10-25 02:00 +01:00"},
		{"paris fall back: 02:00-02:30 closes again at the second 02:30", sundayOnly(paris, window("02:00", "02:30")), "Sun 2026-10-25 02:00 +01:00", week, "Sun 2026-10-25 02:30 +01:00"},
		{"new york spring forward: saturday night to the sunday 22:00 window", sundayOnly(newYork, window("22:00", "06:00")), "Sat 2026-03-07 23:00 -05:00", week, "Sun 2026-03-08 22:00 -04:00"},
		{"new york spring forward: sunday's window closes monday 06:00 by the calendar", sundayOnly(newYork, window("22:00", "06:00")), "Sun 2026-03-08 22:00 -04:00", week, "Mon 2026-03-09 06:00 -04:00"},
		{"new york fall back: 01:00-02:00 closes at 02:00 standard time", sundayOnly(newYork, window("01:00", "02:00")), "Sun 2026-11-01 01:00 -04:00", week, "Sun 2026-11-01 02:00 -05:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc := tt.pool.Location
			from := instant(t, loc, tt.from)
			got, ok := schedule.NextChange(tt.pool, from, tt.horizon)
			if tt.want == "" {
				if ok {
					t.Errorf("NextChange = %s, want none", got.In(loc).Format(layout))
				}
				return
			}
			want := instant(t, loc, tt.want)
			if !ok || !got.Equal(want) {
				t.Errorf("NextChange = %s (found %v), want %s", got.In(loc).Format(layout), ok, tt.want)
			}
		})
	}
}

// TestNextChangeAgreesWithMinuteScan checks NextChange against the obvious,
// slow answer on schedules and days chosen to be awkward. Every zone here has
// whole-minute offsets, so every change falls on a whole UTC minute.
func TestNextChangeAgreesWithMinuteScan(t *testing.T) {
	paris, newYork := mustZone("Europe/Paris"), mustZone("America/New_York")
	gapAndOverlap := func(loc *time.Location) domain.Pool {
		return domain.Pool{Location: loc, Schedule: []domain.ScheduleEntry{
			{Name: "base", Hot: 1},
			{Name: "early", Hot: 2, Match: &domain.Match{Window: window("01:30", "02:30")}},
			{Name: "sat-night", Hot: 3, Match: &domain.Match{Days: days(time.Saturday), Window: window("23:00", "02:15")}},
			{Name: "sunday", Hot: 4, Match: &domain.Match{Days: days(time.Sunday), Window: window("02:45", "24:00")}},
		}}
	}
	pools := map[string]domain.Pool{
		"seed in paris":            seedPool(paris),
		"seed in new york":         seedPool(newYork),
		"gap and overlap paris":    gapAndOverlap(paris),
		"gap and overlap new york": gapAndOverlap(newYork),
	}
	starts := []time.Time{
		time.Date(2026, 3, 6, 0, 0, 0, 0, time.UTC),   // before new york's spring forward
		time.Date(2026, 3, 27, 0, 0, 0, 0, time.UTC),  // before paris's spring forward
		time.Date(2026, 10, 23, 0, 0, 0, 0, time.UTC), // before paris's fall back
		time.Date(2026, 10, 30, 0, 0, 0, 0, time.UTC), // before new york's fall back
	}
	const horizon = 36 * time.Hour
	for name, pool := range pools {
		t.Run(name, func(t *testing.T) {
			for _, start := range starts {
				// Odd steps land on, between and beside the edges.
				for from := start; from.Before(start.Add(72 * time.Hour)); from = from.Add(97*time.Minute + 17*time.Second) {
					got, gotOK := schedule.NextChange(pool, from, horizon)
					want, wantOK := scanMinutes(pool, from, horizon)
					if gotOK != wantOK || !got.Equal(want) {
						t.Fatalf("from %s: NextChange = %s %v, minute scan = %s %v",
							from.In(pool.Location).Format(layoutSeconds),
							got.In(pool.Location).Format(layout), gotOK,
							want.In(pool.Location).Format(layout), wantOK)
					}
				}
			}
		})
	}
}

func scanMinutes(p domain.Pool, from time.Time, horizon time.Duration) (time.Time, bool) {
	current := schedule.Resolve(p, from)
	until := from.Add(horizon)
	for t := from.Truncate(time.Minute).Add(time.Minute); !t.After(until); t = t.Add(time.Minute) {
		if schedule.Resolve(p, t) != current {
			return t, true
		}
	}
	return time.Time{}, false
}
