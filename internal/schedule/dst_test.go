package schedule_test

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/schedule"
)

// 2026 DST changes used below:
//   Europe/Paris      Sun 03-29 02:00 +01:00 -> 03:00 +02:00; Sun 10-25 03:00 +02:00 -> 02:00 +01:00
//   America/New_York  Sun 03-08 02:00 -05:00 -> 03:00 -04:00; Sun 11-01 02:00 -04:00 -> 01:00 -05:00

func TestResolveOnParisDSTDays(t *testing.T) {
	sunday := days(time.Sunday)
	runMatchCases(t, zone(t, "Europe/Paris"), []matchCase{
		// Spring forward: 02:00-02:59 does not exist.
		{"spring forward: 01:00-03:00 opens at 01:00 winter time", domain.Match{Days: sunday, Window: window("01:00", "03:00")}, "Sun 2026-03-29 01:00 +01:00", true},
		{"spring forward: 01:00-03:00 is open at 01:59 winter time", domain.Match{Days: sunday, Window: window("01:00", "03:00")}, "Sun 2026-03-29 01:59 +01:00", true},
		{"spring forward: 01:00-03:00 is closed one real hour later, at 03:00 summer time", domain.Match{Days: sunday, Window: window("01:00", "03:00")}, "Sun 2026-03-29 03:00 +02:00", false},
		{"spring forward: 02:30-04:00 is shut at 01:59 winter time", domain.Match{Days: sunday, Window: window("02:30", "04:00")}, "Sun 2026-03-29 01:59 +01:00", false},
		{"spring forward: 02:30-04:00 opens when the clocks jump to 03:00", domain.Match{Days: sunday, Window: window("02:30", "04:00")}, "Sun 2026-03-29 03:00 +02:00", true},
		{"spring forward: saturday's 22:00-06:00 is open at sunday 05:59 summer time", domain.Match{Days: days(time.Saturday), Window: window("22:00", "06:00")}, "Sun 2026-03-29 05:59 +02:00", true},
		{"spring forward: saturday's 22:00-06:00 closes at sunday 06:00 summer time", domain.Match{Days: days(time.Saturday), Window: window("22:00", "06:00")}, "Sun 2026-03-29 06:00 +02:00", false},
		// Monday 00:30 +02:00 is Saturday 23:30 +01:00 minus 24 real hours;
		// its window is still Sunday's, by the calendar.
		{"after spring forward: monday 00:30 is the tail of sunday's window", domain.Match{Days: sunday, Window: window("22:00", "06:00")}, "Mon 2026-03-30 00:30 +02:00", true},
		{"after spring forward: monday 00:30 is not the tail of saturday's window", domain.Match{Days: days(time.Saturday), Window: window("22:00", "06:00")}, "Mon 2026-03-30 00:30 +02:00", false},

		// Fall back: 02:00-02:59 happens twice.
		{"fall back: 02:00-03:00 is shut at 01:59 summer time", domain.Match{Days: sunday, Window: window("02:00", "03:00")}, "Sun 2026-10-25 01:59 +02:00", false},
		{"fall back: 02:00-03:00 holds the first 02:30, summer time", domain.Match{Days: sunday, Window: window("02:00", "03:00")}, "Sun 2026-10-25 02:30 +02:00", true},
		{"fall back: 02:00-03:00 holds the first 02:59, summer time", domain.Match{Days: sunday, Window: window("02:00", "03:00")}, "Sun 2026-10-25 02:59 +02:00", true},
		{"fall back: 02:00-03:00 holds the second 02:00, winter time", domain.Match{Days: sunday, Window: window("02:00", "03:00")}, "Sun 2026-10-25 02:00 +01:00", true},
		{"fall back: 02:00-03:00 holds the second 02:30, winter time", domain.Match{Days: sunday, Window: window("02:00", "03:00")}, "Sun 2026-10-25 02:30 +01:00", true},
		{"fall back: 02:00-03:00 closes at 03:00 winter time", domain.Match{Days: sunday, Window: window("02:00", "03:00")}, "Sun 2026-10-25 03:00 +01:00", false},
		// Sunday 23:30 +01:00 minus 24 real hours is Sunday 00:30 +02:00;
		// the window's tail is still Saturday's, by the calendar.
		{"after fall back: sunday 23:30 is the tail of saturday's 23:50-23:40", domain.Match{Days: days(time.Saturday), Window: window("23:50", "23:40")}, "Sun 2026-10-25 23:30 +01:00", true},
		{"after fall back: sunday 23:30 is not the tail of sunday's 23:50-23:40", domain.Match{Days: sunday, Window: window("23:50", "23:40")}, "Sun 2026-10-25 23:30 +01:00", false},
	})
}

func TestResolveOnNewYorkDSTDays(t *testing.T) {
	sunday := days(time.Sunday)
	runMatchCases(t, zone(t, "America/New_York"), []matchCase{
		// Spring forward: 02:00-02:59 does not exist.
		{"spring forward: 01:00-03:00 is open at 01:59 standard time", domain.Match{Days: sunday, Window: window("01:00", "03:00")}, "Sun 2026-03-08 01:59 -05:00", true},
		{"spring forward: 01:00-03:00 is closed at 03:00 daylight time", domain.Match{Days: sunday, Window: window("01:00", "03:00")}, "Sun 2026-03-08 03:00 -04:00", false},
		{"spring forward: 02:30-04:00 opens when the clocks jump to 03:00", domain.Match{Days: sunday, Window: window("02:30", "04:00")}, "Sun 2026-03-08 03:00 -04:00", true},
		{"after spring forward: monday 00:30 is the tail of sunday's window", domain.Match{Days: sunday, Window: window("22:00", "06:00")}, "Mon 2026-03-09 00:30 -04:00", true},
		{"after spring forward: monday 00:30 is not the tail of saturday's window", domain.Match{Days: days(time.Saturday), Window: window("22:00", "06:00")}, "Mon 2026-03-09 00:30 -04:00", false},

		// Fall back: 01:00-01:59 happens twice.
		{"fall back: 01:00-02:00 is shut at 00:59 daylight time", domain.Match{Days: sunday, Window: window("01:00", "02:00")}, "Sun 2026-11-01 00:59 -04:00", false},
		{"fall back: 01:00-02:00 holds the first 01:30, daylight time", domain.Match{Days: sunday, Window: window("01:00", "02:00")}, "Sun 2026-11-01 01:30 -04:00", true},
		{"fall back: 01:00-02:00 holds the second 01:00, standard time", domain.Match{Days: sunday, Window: window("01:00", "02:00")}, "Sun 2026-11-01 01:00 -05:00", true},
		{"fall back: 01:00-02:00 holds the second 01:59, standard time", domain.Match{Days: sunday, Window: window("01:00", "02:00")}, "Sun 2026-11-01 01:59 -05:00", true},
		{"fall back: 01:00-02:00 closes at 02:00 standard time", domain.Match{Days: sunday, Window: window("01:00", "02:00")}, "Sun 2026-11-01 02:00 -05:00", false},
		{"fall back: 02:00-03:00 happens once and holds 02:30 standard time", domain.Match{Days: sunday, Window: window("02:00", "03:00")}, "Sun 2026-11-01 02:30 -05:00", true},
	})
}

func TestWindowInsideSpringForwardGapNeverHolds(t *testing.T) {
	for _, tt := range []struct{ zone, day string }{
		{"Europe/Paris", "Sun 2026-03-29 00:00 +01:00"},
		{"America/New_York", "Sun 2026-03-08 00:00 -05:00"},
	} {
		t.Run(tt.zone, func(t *testing.T) {
			loc := zone(t, tt.zone)
			pool := onOff(loc, domain.Match{Window: window("02:00", "03:00")})
			start := instant(t, loc, tt.day)
			for at := start; at.Before(start.Add(23 * time.Hour)); at = at.Add(time.Minute) {
				if got := schedule.Resolve(pool, at); got.Entry == "on" {
					t.Fatalf("02:00-03:00 holds at %s", at.In(loc).Format(layout))
				}
			}
		})
	}
}

func TestWindowLengthInRealTimeOnDSTDays(t *testing.T) {
	tests := []struct {
		name   string
		zone   string
		window *domain.Window
		opens  string
		want   time.Duration
	}{
		{"paris spring forward: 01:00-03:00 lasts one hour", "Europe/Paris", window("01:00", "03:00"), "Sun 2026-03-29 01:00 +01:00", time.Hour},
		{"paris fall back: 02:00-03:00 lasts two hours", "Europe/Paris", window("02:00", "03:00"), "Sun 2026-10-25 02:00 +02:00", 2 * time.Hour},
		{"paris fall back: 22:00-06:00 from saturday lasts nine hours", "Europe/Paris", window("22:00", "06:00"), "Sat 2026-10-24 22:00 +02:00", 9 * time.Hour},
		{"paris spring forward: 22:00-06:00 from saturday lasts seven hours", "Europe/Paris", window("22:00", "06:00"), "Sat 2026-03-28 22:00 +01:00", 7 * time.Hour},
		{"new york spring forward: 01:00-03:00 lasts one hour", "America/New_York", window("01:00", "03:00"), "Sun 2026-03-08 01:00 -05:00", time.Hour},
		{"new york fall back: 01:00-02:00 lasts two hours", "America/New_York", window("01:00", "02:00"), "Sun 2026-11-01 01:00 -04:00", 2 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc := zone(t, tt.zone)
			pool := onOff(loc, domain.Match{Window: tt.window})
			opens := instant(t, loc, tt.opens)
			if got := schedule.Resolve(pool, opens).Entry; got != "on" {
				t.Fatalf("window not open at %s (entry %q)", tt.opens, got)
			}
			closes, ok := schedule.NextChange(pool, opens, 48*time.Hour)
			if !ok {
				t.Fatal("window never closes")
			}
			if got := closes.Sub(opens); got != tt.want {
				t.Errorf("window lasts %v (closes %s), want %v", got, closes.In(loc).Format(layout), tt.want)
			}
		})
	}
}
