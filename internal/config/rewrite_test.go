package config

import (
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/schedule"
)

// plan is a schedule in UTC: 2 hot on weekdays 08:00–18:00, else none.
var plan = []domain.ScheduleEntry{{Name: "weekdays", Hot: 2, Match: &domain.Match{
	Days:   []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday},
	Window: &domain.Window{Start: 8 * 60, End: 18 * 60},
}}}

func TestWithSchedulesOverridesAMergedTimezone(t *testing.T) {
	// p takes its timezone from base twice over: written out, and merged.
	src := `runners:
  r: {image: u}
pools:
  base: &defaults
    runner: r
    timezone: Europe/Paris
  p:
    <<: *defaults
    timezone: Europe/Paris
    schedule: [{name: d, hot: 1}]
  q:
    <<: *defaults
`
	out, err := WithSchedules("runs-on.yml", []byte(src), map[string][]domain.ScheduleEntry{"p": plan})
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustParse(t, string(out))
	p, _ := cfg.Pool("p")
	if p.Location != time.UTC {
		t.Fatalf("the planned pool reads its schedule in %v, the plan is in UTC:\n%s", p.Location, out)
	}
	monday9 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	if got := schedule.Resolve(p, monday9); got.Target.Hot != 2 {
		t.Errorf("Monday 09:00 UTC keeps %+v", got)
	}
	for _, name := range []string{"base", "q"} {
		if other, _ := cfg.Pool(name); other.Timezone != "Europe/Paris" {
			t.Errorf("pool %s changed: %+v", name, other)
		}
	}
}

func TestWithSchedulesRefusesToChangeOtherPools(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"others merge from the pool", `runners:
  r: {image: u}
pools:
  p: &p
    runner: r
    timezone: Europe/Paris
    schedule: [{name: d, hot: 1}]
  q:
    <<: *p
`, `pool "q" would change with the rewrite of "p"`},
		{"the pool is an alias of another", `runners:
  r: {image: u}
pools:
  q: &q
    runner: r
    schedule: [{name: d, hot: 1}]
  p: *q
`, `pool "q" would change with the rewrite of "p"`},
		{"both aliases planned apart", `runners:
  r: {image: u}
pools:
  p: &p
    runner: r
  q: *p
`, `pool "p" does not read back with its planned schedule in UTC`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			schedules := map[string][]domain.ScheduleEntry{"p": plan}
			if strings.Contains(c.name, "both") {
				schedules["q"] = []domain.ScheduleEntry{{Name: "d", Hot: 1}}
			}
			out, err := WithSchedules("runs-on.yml", []byte(c.src), schedules)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q\n%s", err, c.want, out)
			}
		})
	}
}
