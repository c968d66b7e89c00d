package reaper

import "time"

// hearing is since when this process could hear agents: from its start,
// and again from the end of any gap between two of its looks longer than
// the gap allowed (the process was stopped, its host paused, its loop
// stuck, or it did not hold the loop's lease): agents' reports during such
// a gap were not taken, so their silence says nothing of their machines.
type hearing struct {
	since, last time.Time
}

// look notes a look at now and returns since when agents could be heard.
func (h *hearing) look(now time.Time, gap time.Duration) time.Time {
	if !h.last.IsZero() && now.Sub(h.last) > gap {
		h.since = now
	}
	h.last = now
	return h.since
}
