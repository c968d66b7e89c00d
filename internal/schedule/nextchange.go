package schedule

import (
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// NextChange returns the first instant after from, and no later than
// from+horizon, at which Resolve's result differs from Resolve(p, from). It
// reports false when the result holds for the whole horizon.
//
// Resolve depends only on the local weekday and minute of day, so its result
// can change only where the wall clock reaches a window edge or midnight, or
// where the zone's offset jumps (a spring-forward gap can skip over an edge).
// Those instants are enumerated, sorted, and checked in order; between two of
// them the result is constant.
func NextChange(p domain.Pool, from time.Time, horizon time.Duration) (time.Time, bool) {
	if horizon <= 0 {
		return time.Time{}, false
	}
	current := Resolve(p, from)
	for _, t := range candidates(p, from, from.Add(horizon)) {
		if Resolve(p, t) != current {
			return t, true
		}
	}
	return time.Time{}, false
}

// candidates lists, sorted and without duplicates, the instants in
// (from, until] at which Resolve's result may change.
func candidates(p domain.Pool, from, until time.Time) []time.Time {
	loc := location(p)
	offsets, out := zonePeriods(loc, from, until)
	edges := edgeMinutes(p.Schedule)

	// Wall times are handled as UTC values so that calendar arithmetic is
	// plain and days are all 24 hours long.
	first := civilDate(from.In(loc)).AddDate(0, 0, -1)
	last := civilDate(until.In(loc)).AddDate(0, 0, 1)
	for day := first; !day.After(last); day = day.AddDate(0, 0, 1) {
		for _, m := range edges {
			wall := day.Add(time.Duration(m) * time.Minute)
			// A wall time occurs once per offset that maps back to it:
			// never in a spring-forward gap, twice in a fall-back overlap.
			for _, off := range offsets {
				t := wall.Add(-time.Duration(off) * time.Second)
				if t.After(from) && !t.After(until) && wallClock(t.In(loc)).Equal(wall) {
					out = append(out, t)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return slices.CompactFunc(out, func(a, b time.Time) bool { return a.Equal(b) })
}

// zonePeriods returns the UTC offsets (in seconds) loc uses between from and
// until, and the instants in (from, until] where the offset changes.
func zonePeriods(loc *time.Location, from, until time.Time) (offsets []int, shifts []time.Time) {
	t := from.In(loc)
	for {
		_, off := t.Zone()
		if !slices.Contains(offsets, off) {
			offsets = append(offsets, off)
		}
		_, end := t.ZoneBounds()
		if end.IsZero() || end.After(until) || !end.After(t) {
			return offsets, shifts
		}
		shifts = append(shifts, end)
		t = end.In(loc)
	}
}

// edgeMinutes are the minutes of the day where a schedule's matches can
// start or stop holding: midnight (days change) and every window's ends.
func edgeMinutes(entries []domain.ScheduleEntry) []int {
	edges := []int{0}
	for _, e := range entries {
		if e.Match == nil || e.Match.Window == nil {
			continue
		}
		for _, m := range []int{e.Match.Window.Start, e.Match.Window.End} {
			m = ((m % minutesPerDay) + minutesPerDay) % minutesPerDay
			if !slices.Contains(edges, m) {
				edges = append(edges, m)
			}
		}
	}
	return edges
}

// civilDate is the calendar date of local as midnight UTC.
func civilDate(local time.Time) time.Time {
	y, m, d := local.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// wallClock is the date and time local shows, as the same reading in UTC.
func wallClock(local time.Time) time.Time {
	y, mo, d := local.Date()
	h, mi, s := local.Clock()
	return time.Date(y, mo, d, h, mi, s, local.Nanosecond(), time.UTC)
}
