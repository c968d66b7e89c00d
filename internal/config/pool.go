package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/schedule"
)

func (p *parser) pools(n *yaml.Node) []domain.Pool {
	var out []domain.Pool
	p.entries("pools", "pools", n, func(k, v *yaml.Node) {
		path := join("pools", k.Value)
		p.checkName(path, "pool", k)
		out = append(out, p.pool(path, k, v))
	})
	return out
}

func (p *parser) pool(path string, at, n *yaml.Node) domain.Pool {
	pool := domain.Pool{Name: at.Value, Location: time.UTC, HotIdleLifetime: domain.DefaultHotIdleLifetime}
	var maxJobsAt, maxAgeAt, autoscaleAt *yaml.Node
	var hotAt []*yaml.Node
	var scaled autoscaleRead
	p.fields(path, "pool", at, n, []field{
		{key: "environment", parse: func(path string, v *yaml.Node) { pool.Environment, _ = p.str(path, v) }},
		{key: "runner", required: true, parse: func(path string, v *yaml.Node) { pool.Runner = p.runnerRef(path, v) }},
		{key: "timezone", parse: func(path string, v *yaml.Node) { pool.Timezone, pool.Location = p.timezone(path, v) }},
		{key: "schedule", parse: func(path string, v *yaml.Node) { pool.Schedule, hotAt = p.schedule(path, v) }},
		{key: "hot-idle-lifetime", parse: func(path string, v *yaml.Node) {
			d, ok := p.duration(path, v)
			switch {
			case !ok:
			case d <= 0:
				p.errorf(deref(v), path, "hot-idle-lifetime must be > 0, got %s", d)
			case d < minHotIdleLifetime:
				hint := ""
				if d%time.Second == 0 {
					hint = fmt.Sprintf(" (did you mean %dm?)", d/time.Second)
				}
				p.errorf(deref(v), path, "hot-idle-lifetime must be at least %s, got %s: an idle hot instance is replaced after this long, so anything shorter replaces them at nearly every converger cycle%s",
					shortDuration(minHotIdleLifetime), d, hint)
			default:
				pool.HotIdleLifetime = d
			}
		}},
		{key: "reuse", parse: func(path string, v *yaml.Node) { pool.Reuse, _ = p.boolean(path, v) }},
		{key: "max-jobs-per-instance", parse: func(path string, v *yaml.Node) {
			maxJobsAt = v
			pool.MaxJobsPerInstance = p.count(path, "max-jobs-per-instance", v)
		}},
		{key: "autoscale", parse: func(path string, v *yaml.Node) {
			autoscaleAt = deref(v)
			scaled = p.autoscaleBlock(path, v, v)
			pool.Autoscale = scaled.spec
			p.autoscaleAt[pool.Name] = blockPosition(at, n, "autoscale")
		}},
		{key: "max-age", parse: func(path string, v *yaml.Node) {
			maxAgeAt = v
			d, ok := p.duration(path, v)
			if ok && d < 0 {
				p.errorf(deref(v), path, "max-age must be >= 0, got %s", d)
				return
			}
			pool.MaxAge = d
		}},
	})
	// Without reuse an instance serves one job and is gone, so these limits
	// would silently do nothing: say so rather than let the user rely on them.
	if !pool.Reuse && pool.MaxJobsPerInstance > 0 {
		p.errorf(deref(maxJobsAt), join(path, "max-jobs-per-instance"), "max-jobs-per-instance only applies with reuse: true")
	}
	if !pool.Reuse && pool.MaxAge > 0 {
		p.errorf(deref(maxAgeAt), join(path, "max-age"), "max-age only applies with reuse: true")
	}
	if pool.Autoscale != nil && scaled.maxValid {
		p.hotWithinMax(path, pool, hotAt, autoscaleAt, scaled.maxAt)
	}
	return pool
}

// minHotIdleLifetime is the shortest hot-idle-lifetime: shorter, every
// converger cycle would replace the pool's idle hot instances, which is a
// typo (15s for 15m) rather than a setting.
const minHotIdleLifetime = time.Minute

// shortDuration writes whole minutes as 1m rather than time's 1m0s.
func shortDuration(d time.Duration) string {
	if d%time.Minute == 0 {
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// hotWithinMax refuses schedule entries whose hot count is above the
// autoscale block's max: the autoscaler caps the pool's hot target at max,
// so the pool would silently keep fewer hot instances than its schedule
// says. hotAt holds each entry's hot value (nil when not written).
func (p *parser) hotWithinMax(path string, pool domain.Pool, hotAt []*yaml.Node, block, maxAt *yaml.Node) {
	where := fmt.Sprintf("the autoscale block's max %d (line %d)", pool.Autoscale.Max, line(maxAt))
	if maxAt == nil {
		where = fmt.Sprintf("the autoscale block's max %d (line %d; max is not set and %d is its default)", pool.Autoscale.Max, line(block), pool.Autoscale.Max)
	}
	for i, e := range pool.Schedule {
		if e.Hot <= pool.Autoscale.Max || i >= len(hotAt) {
			continue
		}
		p.errorf(hotAt[i], join(index(join(path, "schedule"), i), "hot"),
			"hot %d is above %s, and the autoscaler caps the pool's hot instances at max; set max to at least %d, or lower hot",
			e.Hot, where, e.Hot)
	}
}

// blockPosition is where the block key of the pool at (whose mapping is
// n) is written: at its key when the pool's mapping has it, at the pool's
// key when a merge brings it in.
func blockPosition(at, n *yaml.Node, key string) position {
	if n = deref(n); n != nil {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key && !isMerge(k) {
				return position{k.Line, k.Column}
			}
		}
	}
	return position{line(at), max(at.Column, 1)}
}

func line(n *yaml.Node) int {
	if n == nil || n.Line < 1 {
		return 1
	}
	return n.Line
}

func (p *parser) runnerRef(path string, n *yaml.Node) string {
	name, ok := p.str(path, n)
	if ok && !slices.Contains(p.runnerNames, name) {
		known := "no runners are defined"
		if len(p.runnerNames) > 0 {
			known = "known: " + strings.Join(p.runnerNames, ", ")
		}
		p.errorf(deref(n), path, "unknown runner %q (%s)", name, known)
	}
	return name
}

// timezone resolves an IANA zone name. "Local" is refused: it would make
// the schedule depend on the host the control plane runs on. Names that
// load but rarely mean what they seem to are warned about.
func (p *parser) timezone(path string, n *yaml.Node) (string, *time.Location) {
	name, ok := p.str(path, n)
	if !ok {
		return "", time.UTC
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		p.errorf(deref(n), path, "bad timezone %q: unknown IANA time zone", name)
		return name, time.UTC
	}
	if warning := misleadingZone(name); warning != "" {
		p.warnf(deref(n), path, "%s", warning)
	}
	return name, loc
}

// fixedLegacyZones are the tz database's zones named by a US abbreviation
// that keep one offset all year: someone writing EST for New York gets
// an hour wrong every summer. Each is given with the zone of the clocks
// it is most likely meant for. The other legacy names (EST5EDT, CET, …)
// follow daylight saving time, and UTC and GMT mean what they say.
var fixedLegacyZones = map[string]string{
	"EST": "America/New_York",
	"MST": "America/Denver, or America/Phoenix where there is no daylight saving time",
	"HST": "Pacific/Honolulu",
}

// etcGMT matches the tz database's fixed zones Etc/GMT+N and Etc/GMT-N.
var etcGMT = regexp.MustCompile(`^Etc/GMT([+-])([1-9][0-9]*)$`)

// misleadingZone says why a zone that loads may not be the one meant, or
// returns "".
func misleadingZone(name string) string {
	if m := etcGMT.FindStringSubmatch(name); m != nil {
		// The names follow POSIX TZ strings, whose sign is the offset to
		// add to local time to get UTC: the opposite of ISO 8601's.
		sign := "-"
		if m[1] == "-" {
			sign = "+"
		}
		return fmt.Sprintf("timezone %q is UTC%s%s, not UTC%s%s: the sign of Etc/GMT names is reversed; write Etc/GMT%s%s for UTC%s%s, or name a place (Europe/Paris) to follow its daylight saving time",
			name, sign, m[2], m[1], m[2], sign, m[2], m[1], m[2])
	}
	if meant, ok := fixedLegacyZones[name]; ok {
		return fmt.Sprintf("timezone %q is fixed at its standard time all year and never follows daylight saving time; for the clocks of a place write its zone (%s)", name, meant)
	}
	return ""
}

// schedule reads the entries in order and checks what spans entries: unique
// names and at most one default (an entry without match).
// It also returns where each entry's hot count is written, nil where it is not.
func (p *parser) schedule(path string, n *yaml.Node) (out []domain.ScheduleEntry, hotAt []*yaml.Node) {
	n = deref(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "expected a list of schedule entries, got %s", describe(n))
		return nil, nil
	}
	errsBefore := len(p.errs)
	names := make(map[string]int) // name → line of its first use
	firstDefault := -1
	for i, item := range n.Content {
		ipath := index(path, i)
		e, nameAt, hot, hasMatch := p.scheduleEntry(ipath, item)
		hotAt = append(hotAt, hot)
		if e.Name != "" {
			if line, dup := names[e.Name]; dup {
				p.errorf(nameAt, join(ipath, "name"), "duplicate schedule name %q (first at line %d)", e.Name, line)
			} else {
				names[e.Name] = nameAt.Line
			}
		}
		if !hasMatch {
			if firstDefault >= 0 {
				p.errorf(deref(item), ipath, "more than one schedule entry without match (%q and %q): the default is ambiguous; give all but one a match",
					out[firstDefault].Name, e.Name)
			} else {
				firstDefault = len(out)
			}
		}
		out = append(out, e)
	}
	if len(p.errs) == errsBefore {
		p.warnNeverApplies(path, out, n.Content)
	}
	return out, hotAt
}

// maxShadowCheck bounds the schedules checked for entries that never
// apply: the check costs entries × window edges × 7 days, and a schedule
// longer than this is generated rather than written by hand.
const maxShadowCheck = 256

// warnNeverApplies warns about the entries of a schedule that are never in
// force: an entry with a match whose every instant is also matched by a
// later entry (of the entries that match, the last wins), and a default
// when the matches cover the whole week. Matches depend only on the local
// weekday and minute, and only change at midnight and at window edges, so
// resolving the schedule at those minutes of each weekday is exact; every
// local weekday and minute occurs in some week, whatever the timezone.
func (p *parser) warnNeverApplies(path string, entries []domain.ScheduleEntry, items []*yaml.Node) {
	if len(entries) < 2 || len(entries) > maxShadowCheck {
		return
	}
	// Entries are resolved under their index, so that names (unique once
	// the file is valid) play no part.
	byIndex := make([]domain.ScheduleEntry, len(entries))
	for i, e := range entries {
		e.Name = strconv.Itoa(i)
		byIndex[i] = e
	}
	edges := []int{0}
	for _, e := range entries {
		if e.Match != nil && e.Match.Window != nil {
			edges = append(edges, e.Match.Window.Start%(24*60), e.Match.Window.End%(24*60))
		}
	}
	slices.Sort(edges)
	edges = slices.Compact(edges)

	applies := make([]bool, len(entries))
	// shadowedBy[i] lists, in order, the entries in force at the instants
	// entry i matches.
	shadowedBy := make([][]int, len(entries))
	monday := time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)
	for day := range 7 {
		for _, m := range edges {
			at := monday.Add(time.Duration(day*24*60+m) * time.Minute)
			r := schedule.Resolve(domain.Pool{Schedule: byIndex}, at)
			if r.Entry == "" {
				continue
			}
			winner, _ := strconv.Atoi(r.Entry)
			applies[winner] = true
			for i, e := range byIndex[:winner] {
				if e.Match != nil && schedule.Resolve(domain.Pool{Schedule: byIndex[i : i+1]}, at).Entry != "" && !slices.Contains(shadowedBy[i], winner) {
					shadowedBy[i] = append(shadowedBy[i], winner)
				}
			}
		}
	}
	for i, e := range entries {
		if applies[i] || i >= len(items) {
			continue
		}
		ipath := index(path, i)
		if e.Match == nil {
			p.warnf(deref(items[i]), ipath, "the default entry %q never applies: the entries with a match cover the whole week", e.Name)
			continue
		}
		slices.Sort(shadowedBy[i])
		names := make([]string, len(shadowedBy[i]))
		for k, j := range shadowedBy[i] {
			names[k] = strconv.Quote(entries[j].Name)
		}
		p.warnf(deref(items[i]), ipath, "schedule entry %q never applies: whenever it matches, %s later in the list matches too, and the last entry that matches wins; move it below them or remove it",
			e.Name, strings.Join(names, " or "))
	}
}

func (p *parser) scheduleEntry(path string, n *yaml.Node) (e domain.ScheduleEntry, nameAt, hotAt *yaml.Node, hasMatch bool) {
	p.fields(path, "schedule entry", n, n, []field{
		{key: "name", required: true, parse: func(path string, v *yaml.Node) {
			nameAt = deref(v)
			e.Name, _ = p.str(path, v)
		}},
		{key: "match", parse: func(path string, v *yaml.Node) {
			hasMatch = true
			e.Match = p.match(path, v)
		}},
		{key: "hot", parse: func(path string, v *yaml.Node) {
			hotAt = deref(v)
			e.Hot = p.poolSize(path, "hot", v)
		}},
		{key: "stopped", parse: func(path string, v *yaml.Node) { e.Stopped = p.poolSize(path, "stopped", v) }},
	})
	return e, nameAt, hotAt, hasMatch
}

const emptyMatch = "match has neither day nor time (give at least one, or omit match to make this the default entry)"

func (p *parser) match(path string, n *yaml.Node) *domain.Match {
	m := &domain.Match{}
	n = deref(n)
	if isNull(n) {
		p.errorf(n, path, emptyMatch)
		return m
	}
	var seen bool
	p.fields(path, "match", n, n, []field{
		{key: "day", parse: func(path string, v *yaml.Node) { seen = true; m.Days = p.days(path, v) }},
		{key: "time", parse: func(path string, v *yaml.Node) { seen = true; m.Window = p.window(path, v) }},
	})
	if n.Kind == yaml.MappingNode && !seen {
		p.errorf(n, path, emptyMatch)
	}
	return m
}

// days reads a list of day names (or a single one); case is ignored and
// repeats are dropped.
func (p *parser) days(path string, n *yaml.Node) []time.Weekday {
	n = deref(n)
	items := []*yaml.Node{n}
	isList := n != nil && n.Kind == yaml.SequenceNode
	if isList {
		if len(n.Content) == 0 {
			p.errorf(n, path, "day list is empty (omit day to match every day)")
			return nil
		}
		items = n.Content
	}
	var out []time.Weekday
	for i, item := range items {
		ipath := path
		if isList {
			ipath = index(path, i)
		}
		s, ok := p.str(ipath, item)
		if !ok {
			continue
		}
		d, ok := domain.ParseWeekday(strings.ToLower(s))
		if !ok {
			p.errorf(deref(item), ipath, "bad day name %q (expected monday..sunday)", s)
			continue
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// window reads ["HH:MM", "HH:MM"]: start and end, local to the pool's
// timezone. An end before the start wraps past midnight.
func (p *parser) window(path string, n *yaml.Node) *domain.Window {
	n = deref(n)
	if n == nil || n.Kind != yaml.SequenceNode || len(n.Content) != 2 {
		got := describe(n)
		if n != nil && n.Kind == yaml.SequenceNode {
			got = "a list of " + strconv.Itoa(len(n.Content))
		}
		p.errorf(n, path, `expected a list of two times [start, end] such as ["22:00", "06:00"], got %s`, got)
		return nil
	}
	var ends [2]int
	ok := true
	for i, item := range n.Content {
		ipath := index(path, i)
		s, isStr := p.str(ipath, item)
		if !isStr {
			ok = false
			continue
		}
		minutes, valid := parseClock(s)
		switch {
		case !valid:
			p.errorf(deref(item), ipath, "bad time %q (expected HH:MM, 00:00..24:00)", s)
			ok = false
		case i == 0 && minutes == 24*60:
			p.errorf(deref(item), ipath, "bad time %q (24:00 is only allowed as the end)", s)
			ok = false
		}
		ends[i] = minutes
	}
	if !ok {
		return nil
	}
	if ends[0] == ends[1] {
		p.errorf(n, path, "empty window; omit time to match the whole day")
		return nil
	}
	return &domain.Window{Start: ends[0], End: ends[1]}
}

// parseClock reads H:MM or HH:MM into minutes after midnight; 24:00 is 1440.
func parseClock(s string) (int, bool) {
	hh, mm, ok := strings.Cut(s, ":")
	if !ok || len(hh) < 1 || len(hh) > 2 || len(mm) != 2 || !allDigits(hh) || !allDigits(mm) {
		return 0, false
	}
	h, _ := strconv.Atoi(hh)
	m, _ := strconv.Atoi(mm)
	if h > 24 || m > 59 || (h == 24 && m != 0) {
		return 0, false
	}
	return h*60 + m, true
}

func allDigits(s string) bool {
	return strings.TrimLeft(s, "0123456789") == ""
}
