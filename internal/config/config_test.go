package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestExampleParses(t *testing.T) {
	cfg, err := Load("../../examples/runs-on.yml")
	if err != nil {
		t.Fatal(err)
	}
	wantRunners := map[string]domain.RunnerSpec{
		"small-x64": {Name: "small-x64", Image: "ubuntu24-full-x64", RAM: domain.Range{Min: 1, Max: 1}, Family: []string{"t3"},
			Volume: domain.Volume{Type: "gp3", SizeGB: 30, ThroughputMBps: 125, IOPS: 3000}},
		"medium-x64": {Name: "medium-x64", Image: "ubuntu24-full-x64", CPU: domain.Range{Min: 2, Max: 4}, RAM: domain.Range{Min: 4, Max: 16},
			Family: []string{"m7a", "m7i", "c7a"}, Volume: domain.Volume{Type: "gp3", SizeGB: 60}},
	}
	if !reflect.DeepEqual(cfg.Runners, wantRunners) {
		t.Errorf("runners:\ngot  %+v\nwant %+v", cfg.Runners, wantRunners)
	}
	if len(cfg.Images) != 0 {
		t.Errorf("images: %+v", cfg.Images)
	}

	everyDay := []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday}
	weekdays := everyDay[:5]
	wantPools := []domain.Pool{
		{Name: "small-x64", Environment: "dev", Runner: "small-x64", Timezone: "Europe/Paris",
			Schedule: []domain.ScheduleEntry{
				{Name: "default", Hot: 1, Stopped: 2},
				{Name: "nights", Match: &domain.Match{Days: everyDay, Window: &domain.Window{Start: 22 * 60, End: 6 * 60}}, Stopped: 2},
				{Name: "weekends", Match: &domain.Match{Days: []time.Weekday{time.Saturday, time.Sunday}}, Stopped: 1},
			},
			HotIdleLifetime: 10 * time.Minute},
		{Name: "medium-x64", Environment: "dev", Runner: "medium-x64", Timezone: "America/New_York",
			Schedule: []domain.ScheduleEntry{
				{Name: "default", Stopped: 1},
				{Name: "working-hours", Match: &domain.Match{Days: weekdays, Window: &domain.Window{Start: 8*60 + 30, End: 18 * 60}}, Hot: 2, Stopped: 2},
			},
			HotIdleLifetime: 15 * time.Minute, Reuse: true, MaxJobsPerInstance: 20, MaxAge: 12 * time.Hour},
		{Name: "burst-x64", Environment: "dev", Runner: "small-x64", Schedule: []domain.ScheduleEntry{{Name: "default", Hot: 1}},
			HotIdleLifetime: 10 * time.Minute, Autoscale: &domain.AutoscaleSpec{
				Min: 0, Max: 5, RunnersPerInstance: 1, PollInterval: 30 * time.Second,
				ScaleUpThreshold: 1.5, ScaleDownThreshold: 0.25, ScaleUpCooldown: time.Minute, ScaleDownCooldown: 3 * time.Minute,
				ScaleUpStep: 2, ScaleDownStep: 1, ScaleUpProportion: 0.5, ScaleDownProportion: 0.5,
				StabilizationWindow: 3 * time.Minute, DecayHalfLife: 2 * time.Minute, BreachThreshold: 1.5,
			}},
		{Name: "dependabot", Runner: "small-x64", Schedule: []domain.ScheduleEntry{{Name: "default", Stopped: 1}},
			HotIdleLifetime: 10 * time.Minute},
	}
	if len(cfg.Pools) != len(wantPools) {
		t.Fatalf("got %d pools", len(cfg.Pools))
	}
	for i, got := range cfg.Pools {
		want := wantPools[i]
		wantLoc := want.Timezone
		if wantLoc == "" {
			wantLoc = "UTC"
		}
		if got.Location == nil || got.Location.String() != wantLoc {
			t.Errorf("pool %s: location %v, want %s", got.Name, got.Location, wantLoc)
		}
		got.Location = nil // *time.Location values are compared by name above
		if !reflect.DeepEqual(got, want) {
			t.Errorf("pool %d:\ngot  %+v\nwant %+v", i, got, want)
		}
	}
	if dev := cfg.PoolsFor("dev"); len(dev) != 4 {
		t.Errorf("dev has %d pools", len(dev))
	}
	if prod := cfg.PoolsFor("prod"); len(prod) != 1 || prod[0].Name != "dependabot" {
		t.Errorf("prod pools %+v", prod)
	}
}

func TestInvalidExampleReportsEveryProblem(t *testing.T) {
	_, err := Load("../../examples/invalid.yml")
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %T %v", err, err)
	}
	const f = "../../examples/invalid.yml"
	want := []string{
		f + `:6:14: runners.small-x64.cpu[1]: cpu must be > 0, got 0`,
		f + `:7:13: runners.small-x64.volume: bad volume "gp3:30:125mbps": size "30" is not a size such as 30gb (at most 1048576gb)`,
		f + `:8:11: runners.small-x64.spot: bad spot value "cheapest" (expected true, false, price-capacity-optimized, pco, lowest-price or capacity-optimized)`,
		f + `:9:3: runners.large-x64: missing required key "image" in runner`,
		f + `:14:13: pools.small-x64.runner: unknown runner "smal-x64" (known: small-x64, large-x64)`,
		f + `:15:15: pools.small-x64.timezone: bad timezone "Europe/Pariss": unknown IANA time zone`,
		f + `:16:24: pools.small-x64.hot-idle-lifetime: hot-idle-lifetime must be > 0, got 0s`,
		f + `:19:14: pools.small-x64.schedule[0].hot: hot must be >= 0, got -1`,
		f + `:22:17: pools.small-x64.schedule[1].match.day[0]: bad day name "mondey" (expected monday..sunday)`,
		f + `:23:18: pools.small-x64.schedule[1].match.time[0]: bad time "25:00" (expected HH:MM, 00:00..24:00)`,
		f + `:24:15: pools.small-x64.schedule[2].name: duplicate schedule name "nights" (first at line 20)`,
		f + `:25:9: pools.small-x64.schedule[2]: unknown key "hott" in schedule entry (known: name, match, hot, stopped)`,
		f + `:27:17: pools.small-x64.schedule[2].match.time: empty window; omit time to match the whole day`,
		f + `:28:9: pools.small-x64.schedule[3]: more than one schedule entry without match ("default" and "fallback"): the default is ambiguous; give all but one a match`,
		f + `:32:28: pools.other.max-jobs-per-instance: max-jobs-per-instance only applies with reuse: true`,
		f + `:33:5: pools.other: unknown key "colour" in pool (known: environment, runner, timezone, schedule, hot-idle-lifetime, reuse, max-jobs-per-instance, autoscale, max-age)`,
		f + `:37:10: images.my-ubuntu.ami: ami "my-ubuntu-24.04" is not an AMI id (ami-…); to look an image up by name, give name and owner`,
	}
	sameLines(t, "examples/invalid.yml", strings.Split(err.Error(), "\n"), want)
	if len(errs) != len(want) || errs[0].File != f || errs[0].Line != 6 || errs[0].Col != 14 {
		t.Errorf("structured errors %+v", errs)
	}
}

func TestDocumentProblems(t *testing.T) {
	const noPools = `missing required key "pools" in configuration file (a file cut short while being written, or the wrong file?); to have no pools, write pools: {}`
	cases := []problemCase{
		{"empty file", "", []string{"1:1: the file holds no configuration; to have no pools, write pools: {}"}},
		{"comments only", "# nothing yet\n", []string{"1:1: the file holds no configuration; to have no pools, write pools: {}"}},
		{"a file too large to keep", "pools: {}\n" + strings.Repeat("# padding\n", 26215),
			[]string{"1:1: the file is 262160 bytes, over the 262144 a configuration may be"}},
		{"empty sections", "runners:\npools:\nimages:\n", nil},
		{"RunsOn keys bullpen ignores", "_extends: .github-private\nadmins: [alice, bob]\npools: {}\n", nil},
		{"unknown top-level key", "runners: {}\npool: {}\n", []string{
			`1:1: ` + noPools,
			`2:1: unknown key "pool" in configuration file (known: runners, pools, images, admins, _extends)`,
		}},
		// Cut before its pools, a file would drain every pool.
		{"no pools", "runners:\n  r: {image: u}\n", []string{`1:1: ` + noPools}},
		{"no pools after comments", "# the runners\nrunners: {}\n", []string{`2:1: ` + noPools}},
		{"only RunsOn keys bullpen ignores", "_extends: .github-private\n", []string{`1:1: ` + noPools}},
		{"null document", "~\n", []string{"1:1: the file holds no configuration; to have no pools, write pools: {}"}},
		{"duplicate top-level key", "pools: {}\npools: {}\n",
			[]string{`2:1: duplicate key "pools" in configuration file (first at line 1)`}},
		{"top level is a list", "- runners\n",
			[]string{`1:1: expected a mapping for the configuration file, got a list`}},
		{"top level is a string", "hello\n",
			[]string{`1:1: expected a mapping for the configuration file, got "hello"`}},
		{"non-string key", "runners:\n  [a]: {image: u}\npools: {}\n",
			[]string{`2:3: runners: keys in runners must be strings, got a list`}},
		{"two documents", "runners: {}\n---\npools: {}\n",
			[]string{`3:1: more than one YAML document (expected one)`}},
		{"trailing empty document", "pools: {}\n---\n", nil},
		{"bad indentation", "runners:\n  r:\n    image: u\n   cpu: 2\n",
			[]string{`4:4: YAML syntax error: did not find expected key`}},
		{"bad indentation deep in a pool", poolBase + "    schedule:\n      - name: a\n        hot: 1\n       stopped: 2\n",
			[]string{`10:8: YAML syntax error: did not find expected '-' indicator`}},
		{"sequence item out of line", poolBase + "    schedule:\n      - name: a\n    - name: b\n",
			[]string{`9:5: YAML syntax error: did not find expected key`}},
		{"unclosed flow list", poolBase + "    schedule: [{name: a}\n    reuse: true\n",
			[]string{`7:5: YAML syntax error: did not find expected ',' or ']'`}},
		{"syntax error on the first line", "runners: [\n",
			[]string{`1:1: YAML syntax error: did not find expected node content`}},
		{"tab indentation", "runners:\n\tr: {}\n",
			[]string{`2:1: YAML syntax error: found character that cannot start any token`}},
		{"unknown anchor", "runners: *nope\n",
			[]string{`1:1: YAML syntax error: unknown anchor 'nope' referenced`}},
		{"errors sorted by position across sections", "pools:\n  p: {runner: x}\nrunners:\n  x: {cpu: 0}\n", []string{
			`4:3: runners.x: missing required key "image" in runner`,
			`4:12: runners.x.cpu: cpu must be > 0, got 0`,
		}},
	}
	checkProblems(t, asIs, cases)
}

func TestAliasesAndMergeKeys(t *testing.T) {
	src := `runners:
  base: &base
    image: ubuntu
    family: [m7a]
  big:
    <<: *base
    cpu: 8
  bigger:
    <<: [{cpu: 16}, *base]
    family: [c7a]
pools:
  p:
    runner: big
    schedule: &sched
      - name: d
        hot: 1
  q:
    runner: bigger
    schedule: *sched
`
	cfg := mustParse(t, src)
	big, _ := cfg.Runner("big")
	bigger, _ := cfg.Runner("bigger")
	wantBig := domain.RunnerSpec{Name: "big", Image: "ubuntu", CPU: domain.Range{Min: 8, Max: 8}, Family: []string{"m7a"}}
	wantBigger := domain.RunnerSpec{Name: "bigger", Image: "ubuntu", CPU: domain.Range{Min: 16, Max: 16}, Family: []string{"c7a"}}
	if !reflect.DeepEqual(big, wantBig) || !reflect.DeepEqual(bigger, wantBigger) {
		t.Errorf("got %+v\n    %+v", big, bigger)
	}
	q, _ := cfg.Pool("q")
	if len(q.Schedule) != 1 || q.Schedule[0].Hot != 1 {
		t.Errorf("aliased schedule %+v", q.Schedule)
	}

	cyclic := "runners:\n  r: &r\n    image: u\n    <<: *r\npools: {}\n"
	if got := problems(t, cyclic); got != nil {
		t.Errorf("a mapping merging itself: %v", got)
	}
	badMerge := "runners:\n  r:\n    image: u\n    <<: [1]\npools: {}\n"
	sameLines(t, badMerge, problems(t, badMerge), []string{`4:10: runners.r: merge (<<) list items must be mappings, got 1`})
}

func TestErrorsFormat(t *testing.T) {
	errs := Errors{
		{File: "a.yml", Line: 3, Col: 7, Msg: "first"},
		{Line: 4, Col: 1, Msg: "no file"},
	}
	want := "a.yml:3:7: first\n4:1: no file"
	if errs.Error() != want {
		t.Errorf("got %q", errs.Error())
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "runs-on.yml")
	if err := os.WriteFile(path, []byte("pools:\n  p: {runner: nope}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":2:15: ") {
		t.Errorf("error does not name the file: %v", err)
	}
	_, err = Load(filepath.Join(dir, "missing.yml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// RunsOn reads the file _extends names before this one; bullpen reads only
// this one, so a file relying on inherited runners or pools must be told.
func TestExtendsWarns(t *testing.T) {
	cfg := mustParse(t, "pools: {}\n_extends: .github-private\n")
	want := `test.yml:2:11: _extends: bullpen does not follow _extends: the settings of ".github-private" are not read, only this file's; copy the runners and pools this file needs into it`
	if got := cfg.Warnings.Error(); got != want {
		t.Fatalf("warnings\n got: %s\nwant: %s", got, want)
	}
}
