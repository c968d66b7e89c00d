package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestScheduleForms(t *testing.T) {
	mon, fri, sat := time.Monday, time.Friday, time.Saturday
	cases := []struct {
		name     string
		schedule string // the pool's schedule:, indented by 4
		want     []domain.ScheduleEntry
	}{
		{"no schedule", "", nil},
		{"empty schedule", "schedule: []", nil},
		{"null schedule", "schedule:", nil},
		{"default only, counts default to zero", "schedule:\n      - name: d\n        hot: 2",
			[]domain.ScheduleEntry{{Name: "d", Hot: 2}}},
		{"days only", "schedule:\n      - name: w\n        match:\n          day: [saturday, sunday]\n        stopped: 1",
			[]domain.ScheduleEntry{{Name: "w", Match: &domain.Match{Days: []time.Weekday{sat, time.Sunday}}, Stopped: 1}}},
		{"day names ignore case and repeats", "schedule:\n      - name: w\n        match:\n          day: [Monday, FRIDAY, monday]",
			[]domain.ScheduleEntry{{Name: "w", Match: &domain.Match{Days: []time.Weekday{mon, fri}}}}},
		{"a single day as a scalar", "schedule:\n      - name: w\n        match: {day: friday}",
			[]domain.ScheduleEntry{{Name: "w", Match: &domain.Match{Days: []time.Weekday{fri}}}}},
		{"time only", `schedule: [{name: n, match: {time: ["09:30", "17:00"]}}]`,
			[]domain.ScheduleEntry{{Name: "n", Match: &domain.Match{Window: &domain.Window{Start: 570, End: 1020}}}}},
		{"wrapping window", `schedule: [{name: n, match: {time: ["22:00", "06:00"]}}]`,
			[]domain.ScheduleEntry{{Name: "n", Match: &domain.Match{Window: &domain.Window{Start: 1320, End: 360}}}}},
		{"24:00 as end", `schedule: [{name: n, match: {time: ["18:00", "24:00"]}}]`,
			[]domain.ScheduleEntry{{Name: "n", Match: &domain.Match{Window: &domain.Window{Start: 1080, End: 1440}}}}},
		{"whole day spelled out", `schedule: [{name: n, match: {time: ["00:00", "24:00"]}}]`,
			[]domain.ScheduleEntry{{Name: "n", Match: &domain.Match{Window: &domain.Window{Start: 0, End: 1440}}}}},
		{"unquoted times and one-digit hours", `schedule: [{name: n, match: {time: [8:00, 23:59]}}]`,
			[]domain.ScheduleEntry{{Name: "n", Match: &domain.Match{Window: &domain.Window{Start: 480, End: 1439}}}}},
		{"day and time", `schedule: [{name: n, match: {day: [friday], time: ["22:00", "06:00"]}, hot: 1, stopped: 3}]`,
			[]domain.ScheduleEntry{{Name: "n", Match: &domain.Match{Days: []time.Weekday{fri}, Window: &domain.Window{Start: 1320, End: 360}}, Hot: 1, Stopped: 3}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if p := poolWith(t, c.schedule); !reflect.DeepEqual(p.Schedule, c.want) {
				t.Errorf("got  %#v\nwant %#v", p.Schedule, c.want)
			}
		})
	}
}

func TestPoolSettings(t *testing.T) {
	cases := []struct {
		name, keys string // added to pool "p", indented by 4
		check      func(t *testing.T, p domain.Pool)
	}{
		{"defaults", "", func(t *testing.T, p domain.Pool) {
			want := domain.Pool{Name: "p", Runner: "small", Location: time.UTC, HotIdleLifetime: domain.DefaultHotIdleLifetime}
			if !reflect.DeepEqual(p, want) {
				t.Errorf("got %+v", p)
			}
		}},
		{"environment", "environment: prod", func(t *testing.T, p domain.Pool) {
			if p.Environment != "prod" {
				t.Errorf("environment %q", p.Environment)
			}
		}},
		{"timezone resolves", "timezone: Europe/Paris", func(t *testing.T, p domain.Pool) {
			if p.Timezone != "Europe/Paris" || p.Location == nil || p.Location.String() != "Europe/Paris" {
				t.Errorf("timezone %q location %v", p.Timezone, p.Location)
			}
			// Paris is UTC+2 in summer: the zone's rules, not just its name, were loaded.
			summer := time.Date(2025, 7, 1, 12, 0, 0, 0, p.Location)
			if _, off := summer.Zone(); off != 2*3600 {
				t.Errorf("offset %d", off)
			}
		}},
		{"timezone UTC", "timezone: UTC", func(t *testing.T, p domain.Pool) {
			if p.Timezone != "UTC" || p.Location.String() != "UTC" {
				t.Errorf("timezone %q location %v", p.Timezone, p.Location)
			}
		}},
		{"hot idle lifetime", "hot-idle-lifetime: 1h30m", func(t *testing.T, p domain.Pool) {
			if p.HotIdleLifetime != 90*time.Minute {
				t.Errorf("lifetime %v", p.HotIdleLifetime)
			}
		}},
		{"reuse with limits", "reuse: true\n    max-jobs-per-instance: 5\n    max-age: 2h", func(t *testing.T, p domain.Pool) {
			if !p.Reuse || p.MaxJobsPerInstance != 5 || p.MaxAge != 2*time.Hour {
				t.Errorf("got %+v", p)
			}
		}},
		{"reuse unlimited", "reuse: true\n    max-jobs-per-instance: 0\n    max-age: 0s", func(t *testing.T, p domain.Pool) {
			if !p.Reuse || p.MaxJobsPerInstance != 0 || p.MaxAge != 0 {
				t.Errorf("got %+v", p)
			}
		}},
		{"zero limits without reuse", "reuse: false\n    max-jobs-per-instance: 0", func(t *testing.T, p domain.Pool) {
			if p.Reuse {
				t.Error("reuse set")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.check(t, poolWith(t, c.keys))
		})
	}
}

func TestPoolProblems(t *testing.T) {
	const emptyMatch = "match has neither day nor time (give at least one, or omit match to make this the default entry)"
	cases := []problemCase{
		{"runner given twice", "runner: smal",
			[]string{`7:5: pools.p: duplicate key "runner" in pool (first at line 6)`}},
		{"bad timezone", "timezone: Europe/Pariss",
			[]string{`7:15: pools.p.timezone: bad timezone "Europe/Pariss": unknown IANA time zone`}},
		{"host-local timezone", "timezone: Local",
			[]string{`7:15: pools.p.timezone: bad timezone "Local": unknown IANA time zone`}},
		{"empty timezone", `timezone: ""`,
			[]string{`7:15: pools.p.timezone: expected a non-empty string, got ""`}},
		{"environment not a string", "environment: [dev]",
			[]string{`7:18: pools.p.environment: expected a non-empty string, got a list`}},
		{"hot idle lifetime zero", "hot-idle-lifetime: 0s",
			[]string{`7:24: pools.p.hot-idle-lifetime: hot-idle-lifetime must be > 0, got 0s`}},
		{"hot idle lifetime negative", "hot-idle-lifetime: -1m",
			[]string{`7:24: pools.p.hot-idle-lifetime: hot-idle-lifetime must be > 0, got -1m0s`}},
		{"hot idle lifetime without unit", "hot-idle-lifetime: 10",
			[]string{`7:24: pools.p.hot-idle-lifetime: bad duration "10" (expected a Go duration such as 10m or 1h30m)`}},
		{"reuse not a bool", "reuse: yes",
			[]string{`7:12: pools.p.reuse: expected true or false, got "yes"`}},
		{"max jobs negative", "reuse: true\n    max-jobs-per-instance: -1",
			[]string{`8:28: pools.p.max-jobs-per-instance: max-jobs-per-instance must be >= 0, got -1`}},
		{"max age negative", "reuse: true\n    max-age: -1h",
			[]string{`8:14: pools.p.max-age: max-age must be >= 0, got -1h0m0s`}},
		{"limits need reuse", "max-jobs-per-instance: 3\n    max-age: 1h", []string{
			`7:28: pools.p.max-jobs-per-instance: max-jobs-per-instance only applies with reuse: true`,
			`8:14: pools.p.max-age: max-age only applies with reuse: true`,
		}},
		{"unknown key", "hot: 1", []string{
			`7:5: pools.p: unknown key "hot" in pool (known: environment, runner, timezone, schedule, hot-idle-lifetime, reuse, max-jobs-per-instance, autoscale, max-age)`,
		}},
		{"schedule not a list", "schedule: {name: d}",
			[]string{`7:15: pools.p.schedule: expected a list of schedule entries, got a mapping`}},
		{"entry not a mapping", "schedule: [d]",
			[]string{`7:16: pools.p.schedule[0]: expected a mapping for the schedule entry, got "d"`}},
		{"entry without name", "schedule: [{hot: 1}]",
			[]string{`7:16: pools.p.schedule[0]: missing required key "name" in schedule entry`}},
		{"hot negative", "schedule: [{name: d, hot: -1}]",
			[]string{`7:31: pools.p.schedule[0].hot: hot must be >= 0, got -1`}},
		{"hot past the bound", "schedule: [{name: d, hot: 1000000000}]",
			[]string{`7:31: pools.p.schedule[0].hot: hot must be at most 10000, got 1000000000`}},
		{"stopped past the bound", "schedule: [{name: d, hot: 10000, stopped: 9223372036854775807}]",
			[]string{`7:47: pools.p.schedule[0].stopped: stopped must be at most 10000, got 9223372036854775807`}},
		{"stopped not a number", "schedule: [{name: d, stopped: two}]",
			[]string{`7:35: pools.p.schedule[0].stopped: expected an integer, got "two"`}},
		{"unknown entry key", "schedule: [{name: d, hott: 1}]",
			[]string{`7:26: pools.p.schedule[0]: unknown key "hott" in schedule entry (known: name, match, hot, stopped)`}},
		{"duplicate entry key", "schedule: [{name: d, hot: 1, hot: 2}]",
			[]string{`7:34: pools.p.schedule[0]: duplicate key "hot" in schedule entry (first at line 7)`}},
		{"duplicate schedule name", "schedule:\n      - name: nights\n        match: {day: [monday]}\n      - name: nights\n        match: {day: [friday]}",
			[]string{`10:15: pools.p.schedule[1].name: duplicate schedule name "nights" (first at line 8)`}},
		{"two defaults", "schedule:\n      - name: a\n      - name: b\n      - name: c", []string{
			`9:9: pools.p.schedule[1]: more than one schedule entry without match ("a" and "b"): the default is ambiguous; give all but one a match`,
			`10:9: pools.p.schedule[2]: more than one schedule entry without match ("a" and "c"): the default is ambiguous; give all but one a match`,
		}},
		{"null match", "schedule: [{name: n, match: }]",
			[]string{`7:33: pools.p.schedule[0].match: ` + emptyMatch}},
		{"empty match", "schedule: [{name: n, match: {}}]",
			[]string{`7:33: pools.p.schedule[0].match: ` + emptyMatch}},
		{"unknown match key", "schedule: [{name: n, match: {days: [monday]}}]", []string{
			`7:33: pools.p.schedule[0].match: ` + emptyMatch,
			`7:34: pools.p.schedule[0].match: unknown key "days" in match (known: day, time)`,
		}},
		{"bad day name", "schedule: [{name: n, match: {day: [monday, mondey]}}]",
			[]string{`7:48: pools.p.schedule[0].match.day[1]: bad day name "mondey" (expected monday..sunday)`}},
		{"empty day list", "schedule: [{name: n, match: {day: []}}]",
			[]string{`7:39: pools.p.schedule[0].match.day: day list is empty (omit day to match every day)`}},
		{"bad hour", `schedule: [{name: n, match: {time: ["25:00", "06:00"]}}]`,
			[]string{`7:41: pools.p.schedule[0].match.time[0]: bad time "25:00" (expected HH:MM, 00:00..24:00)`}},
		{"bad minutes", `schedule: [{name: n, match: {time: ["22:00", "06:60"]}}]`,
			[]string{`7:50: pools.p.schedule[0].match.time[1]: bad time "06:60" (expected HH:MM, 00:00..24:00)`}},
		{"past 24:00", `schedule: [{name: n, match: {time: ["22:00", "24:01"]}}]`,
			[]string{`7:50: pools.p.schedule[0].match.time[1]: bad time "24:01" (expected HH:MM, 00:00..24:00)`}},
		{"not a time", `schedule: [{name: n, match: {time: ["10pm", "6:0"]}}]`, []string{
			`7:41: pools.p.schedule[0].match.time[0]: bad time "10pm" (expected HH:MM, 00:00..24:00)`,
			`7:49: pools.p.schedule[0].match.time[1]: bad time "6:0" (expected HH:MM, 00:00..24:00)`,
		}},
		{"24:00 as start", `schedule: [{name: n, match: {time: ["24:00", "06:00"]}}]`,
			[]string{`7:41: pools.p.schedule[0].match.time[0]: bad time "24:00" (24:00 is only allowed as the end)`}},
		{"empty window", `schedule: [{name: n, match: {time: ["09:00", "09:00"]}}]`,
			[]string{`7:40: pools.p.schedule[0].match.time: empty window; omit time to match the whole day`}},
		{"one time", `schedule: [{name: n, match: {time: ["09:00"]}}]`,
			[]string{`7:40: pools.p.schedule[0].match.time: expected a list of two times [start, end] such as ["22:00", "06:00"], got a list of 1`}},
		{"time as a string", `schedule: [{name: n, match: {time: "09:00-17:00"}}]`,
			[]string{`7:40: pools.p.schedule[0].match.time: expected a list of two times [start, end] such as ["22:00", "06:00"], got "09:00-17:00"`}},
	}
	checkProblems(t, withKeys(poolBase), cases)
}

func TestPoolSectionProblems(t *testing.T) {
	cases := []problemCase{
		{"unknown runner lists the known ones", "runners:\n  small-x64: {image: u}\n  large-x64: {image: u}\npools:\n  p:\n    runner: smal-x64\n",
			[]string{`6:13: pools.p.runner: unknown runner "smal-x64" (known: small-x64, large-x64)`}},
		{"unknown runner without runners", "pools:\n  p:\n    runner: small\n",
			[]string{`3:13: pools.p.runner: unknown runner "small" (no runners are defined)`}},
		{"runners may follow pools", "pools:\n  p:\n    runner: small\nrunners:\n  small: {image: u}\n", nil},
		{"missing runner", "pools:\n  p:\n    environment: dev\n",
			[]string{`2:3: pools.p: missing required key "runner" in pool`}},
		{"pool is null", "pools:\n  p:\n",
			[]string{`2:5: pools.p: expected a mapping for the pool, got nothing`}},
		{"duplicate pool", poolBase + "  p:\n    runner: small\n",
			[]string{`7:3: pools: duplicate key "p" in pools (first at line 5)`}},
		{"pool name unusable in a label", "runners:\n  small: {image: u}\npools:\n  a=b:\n    runner: small\n",
			[]string{`4:3: pools.a=b: bad pool name "a=b" (names may not be empty or contain spaces, "/", "=" or ",")`}},
	}
	checkProblems(t, asIs, cases)
}

func TestPoolsForEnvironment(t *testing.T) {
	cfg := mustParse(t, `runners:
  r: {image: u}
pools:
  dev-only: {runner: r, environment: dev}
  everywhere: {runner: r}
  prod-only: {runner: r, environment: prod}
`)
	names := func(ps []domain.Pool) string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return strings.Join(out, ",")
	}
	for env, want := range map[string]string{
		"dev": "dev-only,everywhere", "prod": "everywhere,prod-only", "staging": "everywhere", "": "everywhere",
		"Dev": "dev-only,everywhere", // as env= labels are matched
	} {
		if got := names(cfg.PoolsFor(env)); got != want {
			t.Errorf("PoolsFor(%q) = %s, want %s", env, got, want)
		}
	}
	if _, ok := cfg.Pool("nope"); ok {
		t.Error("unknown pool found")
	}
	if _, ok := cfg.Runner("nope"); ok {
		t.Error("unknown runner found")
	}
}

func TestSummary(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	match := &domain.Match{Days: []time.Weekday{time.Saturday}}
	cases := []struct {
		pool domain.Pool
		want string
	}{
		{domain.Pool{Name: "small-x64", Runner: "small-x64", Environment: "dev", Timezone: "Europe/Paris", Location: paris,
			Schedule:        []domain.ScheduleEntry{{Name: "default", Hot: 1, Stopped: 2}, {Name: "nights", Match: match}, {Name: "weekends", Match: match}},
			HotIdleLifetime: 10 * time.Minute},
			"small-x64: runner small-x64, env dev, tz Europe/Paris, 3 schedule entries (default hot=1 stopped=2), hot idle lifetime 10m0s"},
		{domain.Pool{Name: "p", Runner: "r", HotIdleLifetime: time.Minute},
			"p: runner r, env any, tz UTC, no schedule (target 0), hot idle lifetime 1m0s"},
		{domain.Pool{Name: "p", Runner: "r", Schedule: []domain.ScheduleEntry{{Name: "w", Match: match, Hot: 1}}, HotIdleLifetime: time.Minute},
			"p: runner r, env any, tz UTC, 1 schedule entry (no default: target 0 outside them), hot idle lifetime 1m0s"},
		{domain.Pool{Name: "p", Runner: "r", HotIdleLifetime: time.Minute, Reuse: true},
			"p: runner r, env any, tz UTC, no schedule (target 0), hot idle lifetime 1m0s, reuse"},
		{domain.Pool{Name: "p", Runner: "r", HotIdleLifetime: time.Minute, Reuse: true, MaxJobsPerInstance: 5, MaxAge: 2 * time.Hour},
			"p: runner r, env any, tz UTC, no schedule (target 0), hot idle lifetime 1m0s, reuse up to 5 jobs for at most 2h0m0s"},
	}
	for _, c := range cases {
		if got := Summary(c.pool); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}

// A hot-idle-lifetime in seconds is a typo for minutes: every converger
// cycle would replace the pool's idle hot instances.
func TestHotIdleLifetimeHasAMinimum(t *testing.T) {
	checkProblems(t, withKeys(poolBase), []problemCase{
		{"seconds for minutes", "hot-idle-lifetime: 15s", []string{
			`7:24: pools.p.hot-idle-lifetime: hot-idle-lifetime must be at least 1m, got 15s: an idle hot instance is replaced after this long, so anything shorter replaces them at nearly every converger cycle (did you mean 15m?)`,
		}},
		{"under a second", "hot-idle-lifetime: 500ms", []string{
			`7:24: pools.p.hot-idle-lifetime: hot-idle-lifetime must be at least 1m, got 500ms: an idle hot instance is replaced after this long, so anything shorter replaces them at nearly every converger cycle`,
		}},
		{"the minimum", "hot-idle-lifetime: 60s", nil},
	})
	if p := poolWith(t, "hot-idle-lifetime: 1m"); p.HotIdleLifetime != minHotIdleLifetime {
		t.Errorf("lifetime %v", p.HotIdleLifetime)
	}
}

// Of the entries whose match holds the last wins, so an entry every instant
// of which a later entry also matches is never in force, nor is a default
// under matches covering the whole week.
func TestScheduleEntriesThatNeverApplyWarn(t *testing.T) {
	cases := []struct {
		name, schedule string // the pool's schedule:, indented by 4
		want           string
	}{
		{"saturday morning before the weekend", `schedule:
      - name: saturday-morning
        match: {day: [saturday], time: ["09:00", "12:00"]}
        hot: 3
      - name: weekend
        match: {day: [saturday, sunday]}
        hot: 1`,
			`test.yml:8:9: pools.p.schedule[0]: schedule entry "saturday-morning" never applies: whenever it matches, "weekend" later in the list matches too, and the last entry that matches wins; move it below them or remove it`},
		{"saturday morning after the weekend", `schedule:
      - name: weekend
        match: {day: [saturday, sunday]}
        hot: 1
      - name: saturday-morning
        match: {day: [saturday], time: ["09:00", "12:00"]}
        hot: 3`, ""},
		{"covered by two later entries together", `schedule:
      - name: friday-night
        match: {day: [friday], time: ["20:00", "02:00"]}
      - name: friday-evening
        match: {day: [friday], time: ["18:00", "24:00"]}
      - name: saturday
        match: {day: [saturday]}`,
			`test.yml:8:9: pools.p.schedule[0]: schedule entry "friday-night" never applies: whenever it matches, "friday-evening" or "saturday" later in the list matches too, and the last entry that matches wins; move it below them or remove it`},
		{"partly covered", `schedule:
      - name: friday-night
        match: {day: [friday], time: ["20:00", "02:00"]}
      - name: friday-evening
        match: {day: [friday], time: ["18:00", "24:00"]}`, ""},
		{"a default under the whole week", `schedule:
      - name: default
        hot: 1
      - name: days
        match: {time: ["06:00", "22:00"]}
      - name: nights
        match: {time: ["22:00", "06:00"]}`,
			`test.yml:8:9: pools.p.schedule[0]: the default entry "default" never applies: the entries with a match cover the whole week`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := mustParse(t, withKeys(poolBase)(c.schedule))
			if got := cfg.Warnings.Error(); got != c.want {
				t.Errorf("warnings\n got: %s\nwant: %s", got, c.want)
			}
		})
	}
	example, err := Load("../../examples/runs-on.yml")
	if err != nil || len(example.Warnings) != 0 {
		t.Errorf("the example: %v, warnings %v", err, example.Warnings)
	}
}

// Zones that load but keep an offset other than the one their name
// suggests are warned about at the value; they still load as written.
func TestMisleadingTimezonesAreWarnedAbout(t *testing.T) {
	for _, tc := range []struct {
		zone   string
		offset int // in July, seconds east of UTC
		want   string
	}{
		{"Etc/GMT+1", -3600, `timezone "Etc/GMT+1" is UTC-1, not UTC+1: the sign of Etc/GMT names is reversed; write Etc/GMT-1 for UTC+1, or name a place (Europe/Paris) to follow its daylight saving time`},
		{"Etc/GMT-10", 10 * 3600, `timezone "Etc/GMT-10" is UTC+10, not UTC-10: the sign of Etc/GMT names is reversed; write Etc/GMT+10 for UTC-10, or name a place (Europe/Paris) to follow its daylight saving time`},
		{"EST", -5 * 3600, `timezone "EST" is fixed at its standard time all year and never follows daylight saving time; for the clocks of a place write its zone (America/New_York)`},
		{"MST", -7 * 3600, `timezone "MST" is fixed at its standard time all year and never follows daylight saving time; for the clocks of a place write its zone (America/Denver, or America/Phoenix where there is no daylight saving time)`},
		{"HST", -10 * 3600, `timezone "HST" is fixed at its standard time all year and never follows daylight saving time; for the clocks of a place write its zone (Pacific/Honolulu)`},
		// These mean what they say.
		{"Etc/GMT", 0, ""},
		{"Etc/GMT+0", 0, ""},
		{"UTC", 0, ""},
		{"EST5EDT", -4 * 3600, ""},
		{"America/New_York", -4 * 3600, ""},
	} {
		cfg := mustParse(t, withKeys(poolBase)("timezone: "+tc.zone))
		var want []string
		if tc.want != "" {
			want = []string{"test.yml:7:15: pools.p.timezone: " + tc.want}
		}
		var got []string
		for _, w := range cfg.Warnings {
			got = append(got, w.Error())
		}
		sameLines(t, tc.zone, got, want)
		p, _ := cfg.Pool("p")
		if _, off := time.Date(2026, 7, 1, 12, 0, 0, 0, p.Location).Zone(); p.Timezone != tc.zone || off != tc.offset {
			t.Errorf("%s: pool in %q at UTC%+d in July, want UTC%+d", tc.zone, p.Timezone, off/3600, tc.offset/3600)
		}
	}
}
