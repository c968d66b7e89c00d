// Package schedule decides which entry of a pool's schedule is in force at an
// instant (Resolve) and when that will next change (NextChange).
//
// # Precedence
//
// An entry without Match is the pool's default. Of the entries whose Match
// holds, the last one in the list wins, wherever the default sits in the list.
// With no match the default applies (the last one, if several are written);
// with neither, the target is zero and no entry is named.
//
// # Local time and DST
//
// Days and windows are read on the wall clock of the pool's Location (UTC
// when nil), derived from the instant with t.In(loc). Windows are therefore
// wall-clock intervals, not durations, and a DST change stretches or shrinks
// them:
//
//   - Spring forward (Europe/Paris 2026-03-29, 02:00→03:00; America/New_York
//     2026-03-08, 02:00→03:00): the skipped wall times never occur, so a
//     window inside the gap (02:00–03:00, 02:15–02:45) does not match that
//     day at all; a window reaching into it starts when the clocks jump
//     (02:30–04:00 opens at 03:00 and lasts one real hour); a window spanning
//     it is an hour shorter (01:00–03:00 lasts one real hour).
//   - Fall back (Europe/Paris 2026-10-25, 03:00→02:00; America/New_York
//     2026-11-01, 02:00→01:00): the repeated wall times occur twice and both
//     occurrences are inside any window containing them, so Paris 02:00–03:00
//     lasts two real hours that day, New York 01:00–02:00 likewise.
//
// A window whose start is after its end wraps midnight and belongs to the day
// it starts on: days=[friday] 22:00–06:00 covers Friday 22:00 to Saturday
// 06:00. The part after midnight asks whether the calendar day before was
// listed. That is the weekday before today's, never the weekday of the
// instant 24 hours earlier, which is wrong around a DST change: Monday 00:30
// after a spring-forward Sunday is, 24 real hours back, Saturday 23:30.
//
// Resolve expects a validated schedule: 0 <= Start < 1440 and
// 0 <= End <= 1440. A window with Start == End is empty and never matches.
package schedule

import (
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// minutesPerDay is also the "24:00" end of a window.
const minutesPerDay = 24 * 60

// Result is the schedule entry in force for a pool at an instant.
type Result struct {
	Entry  string        // name of the entry in force; "" when none applies
	Target domain.Target // its hot/stopped counts; zero when none applies
}

// Resolve returns the entry of p's schedule in force at the instant at.
func Resolve(p domain.Pool, at time.Time) Result {
	local := at.In(location(p))
	var fallback, winner *domain.ScheduleEntry
	for i := range p.Schedule {
		e := &p.Schedule[i]
		switch {
		case e.Match == nil:
			fallback = e
		case holds(*e.Match, local):
			winner = e
		}
	}
	if winner == nil {
		winner = fallback
	}
	if winner == nil {
		return Result{}
	}
	return Result{
		Entry:  winner.Name,
		Target: domain.Target{Hot: winner.Hot, Stopped: winner.Stopped},
	}
}

// location is the zone the pool's schedule is written in.
func location(p domain.Pool) *time.Location {
	if p.Location == nil {
		return time.UTC
	}
	return p.Location
}

// holds reports whether m matches the wall-clock time local.
func holds(m domain.Match, local time.Time) bool {
	today := local.Weekday()
	if m.Window == nil {
		return listed(m.Days, today)
	}
	w := *m.Window
	minute := local.Hour()*60 + local.Minute()
	if !w.Wraps() {
		return w.Start <= minute && minute < w.End && listed(m.Days, today)
	}
	if minute >= w.Start && listed(m.Days, today) {
		return true
	}
	// Before the end, a wrapping window is the tail of yesterday's.
	return minute < w.End && listed(m.Days, dayBefore(today))
}

// dayBefore is the weekday of the previous calendar day. Weekdays follow the
// calendar, not elapsed time, so this holds across DST changes.
func dayBefore(d time.Weekday) time.Weekday {
	return (d + 6) % 7
}

// listed reports whether day is among days; no days means every day.
func listed(days []time.Weekday, day time.Weekday) bool {
	if len(days) == 0 {
		return true
	}
	for _, d := range days {
		if d == day {
			return true
		}
	}
	return false
}
