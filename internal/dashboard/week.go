package dashboard

import (
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/schedule"
)

// slotMinutes is the grain of the week view: schedule windows are written
// to the minute, and a quarter-hour shows 08:30 as 08:30.
const slotMinutes = 15

// weekChart draws the pool's schedule for the current week (Monday to
// Sunday) on the pool's wall clock: one row a day, one band per stretch of
// time with the same target, labelled with its hot and stopped counts,
// and a mark at the present.
func weekChart(p domain.Pool, now time.Time) svgChart {
	const left, top, hourW, rowH = 40.0, 16.0, 28.0, 18.0
	c := svgChart{W: int(left + 24*hourW + 12), H: int(top + 7*rowH + 4),
		Label: "Schedule of the week, hot and stopped targets, in " + zoneName(p)}
	loc := location(p)
	local := now.In(loc)
	monday := time.Date(local.Year(), local.Month(), local.Day()-(int(local.Weekday())+6)%7, 0, 0, 0, 0, loc)
	for h := 0; h <= 24; h += 3 {
		c.text(left+float64(h)*hourW, 11, "middle", "axis", fmt.Sprintf("%02d", h))
	}
	for day := range 7 {
		date := monday.AddDate(0, 0, day)
		y := top + float64(day)*rowH
		class := "axis"
		if date.Year() == local.Year() && date.YearDay() == local.YearDay() {
			class = "today"
		}
		c.text(left-6, y+rowH-5, "end", class, date.Format("Mon"))
		for _, b := range bands(p, date) {
			x := left + float64(b.from)/60*hourW
			w := float64(b.to-b.from) / 60 * hourW
			c.rect(x, y+1, w, rowH-2, b.class(), fmt.Sprintf("%s %s–%s %s: hot %d, stopped %d", date.Format("Mon"),
				clockOf(b.from), clockOf(b.to), entryName(b.entry), b.target.Hot, b.target.Stopped))
			if label := b.label(); w >= float64(len(label))*6+4 {
				c.text(x+w/2, y+rowH-5, "middle", "band", label)
			}
		}
	}
	if d := local.Sub(monday); d >= 0 && d < 7*24*time.Hour {
		day := int(d / (24 * time.Hour))
		x := left + (float64(local.Hour())+float64(local.Minute())/60)*hourW
		y := top + float64(day)*rowH
		c.line(x, y-3, x, y+rowH+3, "now-halo")
		c.line(x, y-3, x, y+rowH+3, "now")
	}
	return c
}

// band is a stretch of one day with the same schedule entry, in minutes
// after midnight.
type band struct {
	from, to int
	entry    string
	target   domain.Target
}

func (b band) class() string {
	switch {
	case b.target.Hot > 0:
		return "wk wk-hot"
	case b.target.Stopped > 0:
		return "wk wk-stopped"
	}
	return "wk wk-none"
}

// label is "hot / stopped", or nothing for an empty target.
func (b band) label() string {
	if b.target == (domain.Target{}) {
		return ""
	}
	return fmt.Sprintf("%d / %d", b.target.Hot, b.target.Stopped)
}

// bands resolves the schedule every slot of date and merges equal slots.
// Wall-clock times a daylight saving change skips resolve to the instant
// Go normalises them to, which is what the pool sees then.
func bands(p domain.Pool, date time.Time) []band {
	var out []band
	for m := 0; m < 24*60; m += slotMinutes {
		at := time.Date(date.Year(), date.Month(), date.Day(), 0, m, 0, 0, date.Location())
		res := schedule.Resolve(p, at)
		if n := len(out); n > 0 && out[n-1].entry == res.Entry && out[n-1].target == res.Target {
			out[n-1].to = m + slotMinutes
			continue
		}
		out = append(out, band{from: m, to: m + slotMinutes, entry: res.Entry, target: res.Target})
	}
	return out
}

func clockOf(minute int) string { return fmt.Sprintf("%02d:%02d", minute/60, minute%60) }

func entryName(e string) string {
	if e == "" {
		return "(no entry)"
	}
	return e
}
