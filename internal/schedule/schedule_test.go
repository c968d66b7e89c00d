package schedule_test

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/schedule"
)

func TestResolvePrecedence(t *testing.T) {
	paris := zone(t, "Europe/Paris")
	seed := seedPool(paris)
	reordered := seedPool(paris)
	s := reordered.Schedule
	reordered.Schedule = []domain.ScheduleEntry{s[2], s[1], s[0]}

	defaultOnly := domain.Pool{Location: paris, Schedule: []domain.ScheduleEntry{
		{Name: "always", Hot: 3, Stopped: 4},
	}}
	noDefault := domain.Pool{Location: paris, Schedule: seed.Schedule[1:]}
	twoDefaults := domain.Pool{Location: paris, Schedule: []domain.ScheduleEntry{
		{Name: "first", Hot: 1}, {Name: "second", Hot: 2},
	}}

	result := func(name string, hot, stopped int) schedule.Result {
		return schedule.Result{Entry: name, Target: domain.Target{Hot: hot, Stopped: stopped}}
	}
	tests := []struct {
		name string
		pool domain.Pool
		at   string
		want schedule.Result
	}{
		{"a default alone applies at any time", defaultOnly, "Sat 2026-11-21 23:00 +01:00", result("always", 3, 4)},
		{"no entry matches on a weekday noon: the default applies", seed, "Mon 2026-11-23 12:00 +01:00", result("default", 1, 2)},
		{"a match beats the default: monday night is nights", seed, "Mon 2026-11-23 23:00 +01:00", result("nights", 0, 2)},
		{"of two matches the later wins: saturday night is weekends", seed, "Sat 2026-11-21 23:00 +01:00", result("weekends", 0, 1)},
		{"saturday noon matches only weekends", seed, "Sat 2026-11-21 12:00 +01:00", result("weekends", 0, 1)},
		{"the tail of sunday night into monday is nights", seed, "Mon 2026-11-23 05:59 +01:00", result("nights", 0, 2)},
		{"list order decides, not specificity: nights listed last wins saturday night", reordered, "Sat 2026-11-21 23:00 +01:00", result("nights", 0, 2)},
		{"a default listed last does not override a match", reordered, "Sat 2026-11-21 12:00 +01:00", result("weekends", 0, 1)},
		{"a default listed last applies when nothing matches", reordered, "Mon 2026-11-23 12:00 +01:00", result("default", 1, 2)},
		{"no default and no match: zero target and no entry", noDefault, "Mon 2026-11-23 12:00 +01:00", schedule.Result{}},
		{"no default but a match: the match applies", noDefault, "Mon 2026-11-23 23:00 +01:00", result("nights", 0, 2)},
		{"no schedule at all: zero target", domain.Pool{}, "Mon 2026-11-23 12:00 +00:00", schedule.Result{}},
		{"two defaults: the later one applies", twoDefaults, "Mon 2026-11-23 12:00 +01:00", result("second", 2, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc := tt.pool.Location
			if loc == nil {
				loc = time.UTC
			}
			got := schedule.Resolve(tt.pool, instant(t, loc, tt.at))
			if got != tt.want {
				t.Errorf("Resolve at %s = %+v, want %+v", tt.at, got, tt.want)
			}
		})
	}
}

// matchCase says whether a match holds at a wall time in UTC.
type matchCase struct {
	name  string
	match domain.Match
	at    string
	want  bool
}

func runMatchCases(t *testing.T, loc *time.Location, tests []matchCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := schedule.Resolve(onOff(loc, tt.match), instant(t, loc, tt.at)).Entry == "on"
			if got != tt.want {
				t.Errorf("match %+v at %s: holds = %v, want %v", tt.match, tt.at, got, tt.want)
			}
		})
	}
}

func TestResolveWindowBoundaries(t *testing.T) {
	office := domain.Match{Window: window("09:00", "17:00")}
	evening := domain.Match{Window: window("18:00", "24:00")}
	runMatchCases(t, time.UTC, []matchCase{
		{"one minute before the start is outside", office, "Wed 2026-11-18 08:59 +00:00", false},
		{"the last second before the start is outside", office, "Wed 2026-11-18 08:59:59 +00:00", false},
		{"the start is inclusive", office, "Wed 2026-11-18 09:00 +00:00", true},
		{"the last second before the end is inside", office, "Wed 2026-11-18 16:59:59 +00:00", true},
		{"the end is exclusive", office, "Wed 2026-11-18 17:00 +00:00", false},
		{"a 24:00 end includes the day's last second", evening, "Wed 2026-11-18 23:59:59 +00:00", true},
		{"a 24:00 end stops at the next midnight", evening, "Thu 2026-11-19 00:00 +00:00", false},
		{"00:00-24:00 covers midnight", domain.Match{Window: window("00:00", "24:00")}, "Thu 2026-11-19 00:00 +00:00", true},
		{"00:00-24:00 covers the day's last minute", domain.Match{Window: window("00:00", "24:00")}, "Thu 2026-11-19 23:59 +00:00", true},
		{"an empty window (start == end) never holds", domain.Match{Window: window("10:00", "10:00")}, "Thu 2026-11-19 10:00 +00:00", false},
	})
}

func TestResolveWindowsAcrossMidnight(t *testing.T) {
	fridayNight := domain.Match{Days: days(time.Friday), Window: window("22:00", "06:00")}
	thuFriNights := domain.Match{Days: days(time.Thursday, time.Friday), Window: window("22:00", "06:00")}
	sundayNight := domain.Match{Days: days(time.Sunday), Window: window("22:00", "06:00")}
	toMidnight := domain.Match{Days: days(time.Friday), Window: window("22:00", "00:00")}
	runMatchCases(t, time.UTC, []matchCase{
		{"friday 21:59 is before friday's window", fridayNight, "Fri 2026-11-20 21:59 +00:00", false},
		{"friday 22:00 opens friday's window", fridayNight, "Fri 2026-11-20 22:00 +00:00", true},
		{"saturday 00:00 is inside friday's window", fridayNight, "Sat 2026-11-21 00:00 +00:00", true},
		{"saturday 05:59 is still friday's window", fridayNight, "Sat 2026-11-21 05:59 +00:00", true},
		{"saturday 06:00 closes friday's window", fridayNight, "Sat 2026-11-21 06:00 +00:00", false},
		{"friday 03:00 belongs to thursday, which is not listed", fridayNight, "Fri 2026-11-20 03:00 +00:00", false},
		{"saturday 22:00 opens no window: saturday is not listed", fridayNight, "Sat 2026-11-21 22:00 +00:00", false},
		{"friday 03:00 matches when thursday is listed", thuFriNights, "Fri 2026-11-20 03:00 +00:00", true},
		{"sunday's window runs into monday across the week's end", sundayNight, "Mon 2026-11-23 05:00 +00:00", true},
		{"sunday 05:00 belongs to saturday, which is not listed", sundayNight, "Sun 2026-11-22 05:00 +00:00", false},
		{"a window ending at 00:00 wraps and ends at midnight", toMidnight, "Fri 2026-11-20 23:59 +00:00", true},
		{"a window ending at 00:00 holds nothing after midnight", toMidnight, "Sat 2026-11-21 00:00 +00:00", false},
		{"without days a wrapping window runs every night", domain.Match{Window: window("22:00", "06:00")}, "Wed 2026-11-18 03:00 +00:00", true},
	})
}

func TestResolveDaysOrWindowAlone(t *testing.T) {
	weekends := domain.Match{Days: days(time.Saturday, time.Sunday)}
	office := domain.Match{Window: window("09:00", "17:00")}
	runMatchCases(t, time.UTC, []matchCase{
		{"days without a window hold from the listed day's midnight", weekends, "Sat 2026-11-21 00:00 +00:00", true},
		{"days without a window hold until the day's last second", weekends, "Sun 2026-11-22 23:59:59 +00:00", true},
		{"days without a window do not hold the day before", weekends, "Fri 2026-11-20 23:59:59 +00:00", false},
		{"days without a window do not hold the day after", weekends, "Mon 2026-11-23 00:00 +00:00", false},
		{"a window without days holds on a monday", office, "Mon 2026-11-23 12:00 +00:00", true},
		{"a window without days holds on a sunday", office, "Sun 2026-11-22 12:00 +00:00", true},
		{"a window without days still ends", office, "Sun 2026-11-22 17:00 +00:00", false},
		{"a match with neither days nor window always holds", domain.Match{}, "Tue 2026-11-24 03:17 +00:00", true},
	})
}

func TestResolveReadsTheInstantInThePoolZone(t *testing.T) {
	// One instant, Friday 21:30 UTC, against Friday 22:00-06:00 in each zone.
	at := time.Date(2026, 11, 20, 21, 30, 0, 0, time.UTC)
	fridayNight := domain.Match{Days: days(time.Friday), Window: window("22:00", "06:00")}
	tests := []struct {
		name  string
		zone  *time.Location
		local string // how the zone reads the instant, checked
		want  bool
	}{
		{"a nil location means utc: friday 21:30 is before the window", nil, "Fri 2026-11-20 21:30 +00:00", false},
		{"utc: friday 21:30 is before the window", time.UTC, "Fri 2026-11-20 21:30 +00:00", false},
		{"paris: friday 22:30 is inside", mustZone("Europe/Paris"), "Fri 2026-11-20 22:30 +01:00", true},
		{"new york: friday 16:30 is before", mustZone("America/New_York"), "Fri 2026-11-20 16:30 -05:00", false},
		{"kolkata: saturday 03:00 is friday's tail", mustZone("Asia/Kolkata"), "Sat 2026-11-21 03:00 +05:30", true},
		{"tokyo: saturday 06:30 is after friday's tail", mustZone("Asia/Tokyo"), "Sat 2026-11-21 06:30 +09:00", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shown := tt.zone
			if shown == nil {
				shown = time.UTC
			}
			if got := at.In(shown).Format(layout); got != tt.local {
				t.Fatalf("instant reads %q in %s, test says %q", got, shown, tt.local)
			}
			got := schedule.Resolve(onOff(tt.zone, fridayNight), at).Entry == "on"
			if got != tt.want {
				t.Errorf("holds = %v, want %v", got, tt.want)
			}
		})
	}
}
