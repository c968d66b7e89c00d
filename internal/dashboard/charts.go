package dashboard

import (
	"fmt"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// svgChart is a chart drawn on the server: shapes whose text the template
// escapes like any other value.
type svgChart struct {
	W, H  int
	Label string // what it shows, for screen readers
	Rects []svgRect
	Lines []svgLine
	Texts []svgText
	Paths []svgPath
	Empty string // shown instead when there is nothing to draw
}

type svgPath struct {
	D     string // the outline, "M x y L x y … Z"
	Class string
}

type svgRect struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

type svgLine struct {
	X1, Y1, X2, Y2 float64
	Class          string
}

type svgText struct {
	X, Y   float64
	Anchor string // start, middle, end
	Class  string
	Text   string
}

func (c *svgChart) rect(x, y, w, h float64, class, title string) {
	c.Rects = append(c.Rects, svgRect{x, y, w, h, class, title})
}

func (c *svgChart) line(x1, y1, x2, y2 float64, class string) {
	c.Lines = append(c.Lines, svgLine{x1, y1, x2, y2, class})
}

func (c *svgChart) text(x, y float64, anchor, class, text string) {
	c.Texts = append(c.Texts, svgText{x, y, anchor, class, text})
}

// queueBuckets are the bins of the queue-time chart: seconds matter for
// warm pools, minutes for cold starts.
var queueBuckets = []struct {
	upTo  time.Duration
	label string
}{
	{2 * time.Second, "<2s"}, {5 * time.Second, "2–5s"}, {10 * time.Second, "5–10s"}, {20 * time.Second, "10–20s"},
	{30 * time.Second, "20–30s"}, {time.Minute, "30–60s"}, {2 * time.Minute, "1–2m"}, {5 * time.Minute, "2–5m"},
	{1<<63 - 1, "≥5m"},
}

func bucketOf(d time.Duration) int {
	for k, b := range queueBuckets {
		if d < b.upTo {
			return k
		}
	}
	return len(queueBuckets) - 1
}

// queueChart draws, for each way of being served, how many jobs waited how
// long: one row of bars per path, each scaled to its own largest bar (the
// counts are written on the bars), with its percentiles beside it.
func queueChart(by map[string][]time.Duration) svgChart {
	const left, barW, gap, rowH, right = 70.0, 44.0, 4.0, 46.0, 190.0
	var rows []string
	for _, p := range paths {
		if len(by[p]) > 0 {
			rows = append(rows, p)
		}
	}
	w := left + float64(len(queueBuckets))*(barW+gap) + right
	c := svgChart{W: int(w), H: int(24 + rowH*float64(len(rows))), Label: "Queue time (queued to started) by how jobs were served"}
	if len(rows) == 0 {
		c.Empty = "No job has started yet."
		return c
	}
	for k, b := range queueBuckets {
		c.text(left+float64(k)*(barW+gap)+barW/2, 14, "middle", "axis", b.label)
	}
	for r, p := range rows {
		counts := make([]int, len(queueBuckets))
		peak := 0
		for _, d := range by[p] {
			k := bucketOf(d)
			counts[k]++
			peak = max(peak, counts[k])
		}
		top := 24 + float64(r)*rowH
		base := top + rowH - 8
		c.text(left-8, base-10, "end", "series", p)
		c.line(left, base, left+float64(len(queueBuckets))*(barW+gap), base, "baseline")
		for k, n := range counts {
			if n == 0 {
				continue
			}
			h := (rowH - 18) * float64(n) / float64(peak)
			x := left + float64(k)*(barW+gap)
			c.rect(x, base-h, barW, h, "bar path-"+p, fmt.Sprintf("%s, %s: %d jobs", p, queueBuckets[k].label, n))
			c.text(x+barW/2, base-h-2, "middle", "count", fmt.Sprint(n))
		}
		st := statsOf(by[p])
		c.text(w-right+10, base-10, "start", "stats",
			fmt.Sprintf("%d jobs · p50 %s · p90 %s", st.N, shortDuration(st.P50), shortDuration(st.P90)))
	}
	return c
}

// sparkline draws the queue times of a pool's latest n jobs, oldest left.
func sparkline(jobs []domain.Job, n int) svgChart {
	const w, h, barW = 200.0, 36.0, 5.0
	c := svgChart{W: int(w), H: int(h), Label: "Queue times of the latest jobs"}
	var ds []time.Duration
	for _, j := range jobs {
		if q, ok := queueTime(j); ok && len(ds) < n {
			ds = append(ds, q)
		}
	}
	if len(ds) == 0 {
		c.Empty = "no jobs yet"
		return c
	}
	peak := ds[0]
	for _, d := range ds {
		peak = max(peak, d)
	}
	c.line(0, h-0.5, w, h-0.5, "baseline")
	for k, d := range ds {
		x := w - float64(k+1)*barW
		bh := max((h-2)*float64(d)/float64(max(peak, time.Second)), 1)
		c.rect(x, h-bh, barW-1, bh, "bar path-"+bucketClass(d), "waited "+shortDuration(d))
	}
	return c
}

// bucketClass colours a wait: fast, slow or cold-start slow.
func bucketClass(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return "hot"
	case d < time.Minute:
		return "stopped"
	}
	return "cold"
}

// stateGroups fold the instance states into the five the history chart
// stacks, bottom up.
var stateGroups = []struct {
	name   string
	states []domain.State
}{
	{"serving", []domain.State{domain.StateClaimed, domain.StateRunning, domain.StateReleasing}},
	{"ready", []domain.State{domain.StateReady}},
	{"parked", []domain.State{domain.StateStopping, domain.StateStopped}},
	{"warming", []domain.State{domain.StatePending, domain.StateBooting}},
	{"ending", []domain.State{domain.StateTerminating, domain.StateError}},
}

// historyChart stacks instances by state over the last historySpan (since
// the server started when that is shorter): one area per group of states,
// a step per minute, and a column per minute whose tooltip gives the
// counts. Its size depends on the span, never on the number of instances.
func historyChart(samples []sample, now time.Time) svgChart {
	const left, top, plotW, plotH = 44.0, 8.0, 720.0, 150.0
	c := svgChart{W: int(left + plotW + 110), H: int(top + plotH + 24), Label: "Instances by state over the last hours"}
	if len(samples) == 0 {
		c.Empty = "No sample yet: one is taken every minute."
		return c
	}
	peak := 1
	for _, s := range samples {
		peak = max(peak, groupTotal(s))
	}
	barW := plotW / historySpan.Minutes()
	start := now.Truncate(time.Minute).Add(-historySpan)
	xOf := func(s sample) float64 { return left + s.at.Sub(start).Minutes()*barW }
	yOf := func(n int) float64 { return top + plotH - plotH*float64(n)/float64(peak) }
	below := make([]int, len(samples)) // the stack under the current group, per sample
	for _, g := range stateGroups {
		var upper, lower strings.Builder
		for k, s := range samples {
			n := groupCount(s, g.states)
			x := xOf(s)
			fmt.Fprintf(&upper, "L%.1f %.1fL%.1f %.1f", x, yOf(below[k]+n), x+barW, yOf(below[k]+n))
			fmt.Fprintf(&lower, "L%.1f %.1fL%.1f %.1f", x, yOf(below[k]), x+barW, yOf(below[k]))
			below[k] += n
		}
		c.Paths = append(c.Paths, svgPath{D: "M" + upper.String()[1:] + reversePath(lower.String()) + "Z", Class: "area st-" + g.name})
	}
	for _, s := range samples {
		c.rect(xOf(s), top, barW, plotH, "hover", hoverText(s))
	}
	c.line(left, top+plotH, left+plotW, top+plotH, "baseline")
	for _, v := range []int{peak, peak / 2} {
		c.line(left, yOf(v), left+plotW, yOf(v), "grid")
		c.text(left-6, yOf(v)+4, "end", "axis", fmt.Sprint(v))
	}
	hours := int(historySpan.Hours())
	for h := 0; h <= hours; h++ {
		label := fmt.Sprintf("−%dh", hours-h)
		if h == hours {
			label = "now"
		}
		c.text(left+float64(h)*60*barW, top+plotH+16, "middle", "axis", label)
	}
	for k, g := range stateGroups {
		y := top + 12 + float64(len(stateGroups)-1-k)*18
		c.rect(left+plotW+14, y-9, 10, 10, "area st-"+g.name, g.name)
		c.text(left+plotW+30, y, "start", "legend", g.name)
	}
	return c
}

// reversePath reverses a sequence of "Lx y" steps, so the lower edge of an
// area is walked back to its start.
func reversePath(steps string) string {
	parts := strings.Split(steps, "L")[1:]
	var b strings.Builder
	for k := len(parts) - 1; k >= 0; k-- {
		b.WriteString("L" + parts[k])
	}
	return b.String()
}

func hoverText(s sample) string {
	parts := []string{s.at.UTC().Format("15:04") + " UTC"}
	for _, g := range stateGroups {
		parts = append(parts, fmt.Sprintf("%s %d", g.name, groupCount(s, g.states)))
	}
	return strings.Join(parts, ", ")
}

func groupTotal(s sample) int {
	n := 0
	for _, g := range stateGroups {
		n += groupCount(s, g.states)
	}
	return n
}

func groupCount(s sample, states []domain.State) int {
	n := 0
	for _, st := range states {
		n += s.counts[st]
	}
	return n
}
