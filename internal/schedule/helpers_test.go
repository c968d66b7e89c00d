package schedule_test

import (
	"fmt"
	"testing"
	"time"
	_ "time/tzdata" // the DST tests must not depend on the machine's zoneinfo

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Instants in tests are written as the wall clock of the pool's zone with its
// offset, so that DST cases say which of two equal wall times they mean.
const (
	layout        = "Mon 2006-01-02 15:04 -07:00"
	layoutSeconds = "Mon 2006-01-02 15:04:05 -07:00"
)

// instant parses s and checks that it is how loc shows that instant: the
// weekday is right and the offset is the one loc uses then.
func instant(t *testing.T, loc *time.Location, s string) time.Time {
	t.Helper()
	for _, l := range []string{layout, layoutSeconds} {
		at, err := time.Parse(l, s)
		if err != nil {
			continue
		}
		if got := at.In(loc).Format(l); got != s {
			t.Fatalf("instant %q reads %q in %s: fix the test's weekday or offset", s, got, loc)
		}
		return at
	}
	t.Fatalf("instant %q: want layout %q", s, layout)
	return time.Time{}
}

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load zone: %v", err)
	}
	return loc
}

func mustZone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// window builds a window from "hh:mm" ends; "24:00" is allowed as the end.
func window(start, end string) *domain.Window {
	return &domain.Window{Start: minutes(start), End: minutes(end)}
}

func minutes(hhmm string) int {
	var h, m int
	if _, err := fmt.Sscanf(hhmm, "%d:%d", &h, &m); err != nil {
		panic(fmt.Sprintf("minutes %q: %v", hhmm, err))
	}
	return h*60 + m
}

func days(d ...time.Weekday) []time.Weekday { return d }

var everyDay = days(time.Monday, time.Tuesday, time.Wednesday, time.Thursday,
	time.Friday, time.Saturday, time.Sunday)

// seedPool is the example configuration of the warm-pool design.
func seedPool(loc *time.Location) domain.Pool {
	return domain.Pool{
		Name:     "small-x64",
		Timezone: loc.String(),
		Location: loc,
		Schedule: []domain.ScheduleEntry{
			{Name: "default", Stopped: 2, Hot: 1},
			{Name: "nights", Stopped: 2, Hot: 0, Match: &domain.Match{
				Days: everyDay, Window: window("22:00", "06:00"),
			}},
			{Name: "weekends", Stopped: 1, Hot: 0, Match: &domain.Match{
				Days: days(time.Saturday, time.Sunday),
			}},
		},
	}
}

// onOff is a pool whose entry "on" applies exactly when m holds; "off" is
// the default otherwise.
func onOff(loc *time.Location, m domain.Match) domain.Pool {
	return domain.Pool{
		Name:     "p",
		Location: loc,
		Schedule: []domain.ScheduleEntry{
			{Name: "off"},
			{Name: "on", Hot: 1, Match: &m},
		},
	}
}
