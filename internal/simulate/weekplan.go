package simulate

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Warm is how many instances of each kind a pool keeps.
type Warm struct{ Hot, Stopped int }

// WeekPlan is a pool's warm instances for each hour of the week, in UTC,
// indexed by weekday and hour.
type WeekPlan [7][24]Warm

func (p *WeekPlan) set(day time.Weekday, hour, n int, hot bool) {
	if hot {
		p[day][hour] = Warm{Hot: n}
	} else {
		p[day][hour] = Warm{Stopped: n}
	}
}

// grow adds a quarter, at least one, to the hour's instances of the kind.
func (p *WeekPlan) grow(day time.Weekday, hour int, hot bool) {
	w := &p[day][hour]
	if hot {
		w.Hot += max(1, w.Hot/4)
	} else {
		w.Stopped += max(1, w.Stopped/4)
	}
}

// run is an hour range [start, end) of one day with one value.
type run struct {
	start, end int
	warm       Warm
}

// Schedule writes the plan as schedule entries: a default entry with the
// plan's most frequent value, and one entry per range of hours with
// another value, the days sharing that range and value together. The
// entries never overlap, so their order does not matter.
func (p WeekPlan) Schedule() []domain.ScheduleEntry {
	def := p.mostFrequent()
	byRun := map[run][]time.Weekday{}
	var order []run
	for _, day := range []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday} {
		for h := 0; h < 24; {
			w := p[day][h]
			end := h + 1
			for end < 24 && p[day][end] == w {
				end++
			}
			if w != def {
				r := run{h, end, w}
				if _, seen := byRun[r]; !seen {
					order = append(order, r)
				}
				byRun[r] = append(byRun[r], day)
			}
			h = end
		}
	}
	entries := []domain.ScheduleEntry{{Name: "default", Hot: def.Hot, Stopped: def.Stopped}}
	for i, r := range order {
		entries = append(entries, domain.ScheduleEntry{
			Name:  fmt.Sprintf("suggested-%d", i+1),
			Match: &domain.Match{Days: byRun[r], Window: &domain.Window{Start: r.start * 60, End: r.end * 60}},
			Hot:   r.warm.Hot, Stopped: r.warm.Stopped,
		})
	}
	return entries
}

// mostFrequent is the value most hours have; of equally frequent ones,
// the cheapest.
func (p WeekPlan) mostFrequent() Warm {
	counts := map[Warm]int{}
	for _, day := range p {
		for _, w := range day {
			counts[w]++
		}
	}
	values := make([]Warm, 0, len(counts))
	for w := range counts {
		values = append(values, w)
	}
	slices.SortFunc(values, func(a, b Warm) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a.Hot, b.Hot), cmp.Compare(a.Stopped, b.Stopped))
	})
	return values[0]
}
