package config

import (
	"strings"
	"testing"
	"time"
)

// autoscaleBase is a file whose pool "p" has an autoscale block that
// continues on line 8 at column 7, where tests add its keys.
const autoscaleBase = `runners:
  r:
    image: x
pools:
  p:
    runner: r
    autoscale:
`

func TestAutoscaleBlock(t *testing.T) {
	cfg, err := Parse("a.yml", []byte(autoscaleBase+`      max: 6
      poll-interval: 30s
      breach-threshold: 1.2
`))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Pools[0].Autoscale
	if a == nil || a.Max != 6 || a.Min != 0 || a.RunnersPerInstance != 1 || a.PollInterval != 30*time.Second ||
		a.BreachThreshold != 1.2 || a.DecayHalfLife != 120*time.Second {
		t.Fatalf("block %+v", a)
	}
	if cfg.Pools[0].Autoscale == nil || !strings.Contains(Summary(cfg.Pools[0]), "hot follows demand up to 6") {
		t.Fatalf("summary %q", Summary(cfg.Pools[0]))
	}
}

func TestAutoscaleBlockErrors(t *testing.T) {
	_, err := Parse("a.yml", []byte(autoscaleBase+`      max: -2
      decay-half-life: 30s
      breach-threshold: 2.0
      poll-interval: 60s
      scale-up-threshold: many
      speed: 3
`))
	if err == nil {
		t.Fatal("a bad block must be refused")
	}
	msg := err.Error()
	for _, want := range []string{
		`a.yml:12:27: pools.p.autoscale.scale-up-threshold: expected a number`,
		`a.yml:13:7: pools.p.autoscale: unknown key "speed" in autoscale block`,
		`pools.p.autoscale: max=-2`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors lack %q:\n%s", want, msg)
		}
	}
}

func TestAutoscaleMaxIsBounded(t *testing.T) {
	_, err := Parse("a.yml", []byte(autoscaleBase+`      max: 1000000000
`))
	if err == nil || !strings.Contains(err.Error(), "pools.p.autoscale: max must be at most 10000, got 1000000000") {
		t.Fatalf("got %v", err)
	}
}

func TestAutoscaleUnreachableThresholdIsRefusedWithTheArithmetic(t *testing.T) {
	_, err := Parse("a.yml", []byte(autoscaleBase+`      max: 3
      decay-half-life: 30s
      breach-threshold: 2.0
      poll-interval: 60s
`))
	want := "breach-threshold=2.0 is unreachable: with poll-interval=60s, decay-half-life=30s and stabilization-window=3m, a sustained breach scores at most 1 + 0.25 + 0.0625 = 1.3125"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

// The autoscaler caps a pool's hot target at max, so a schedule asking for
// more would silently get max; and a pool's machine runs one job, so
// runners-per-instance above 1 would keep a fraction of the machines the
// queue needs.
func TestAutoscaleBlockAgainstThePool(t *testing.T) {
	cases := []problemCase{
		{"hot above the default max", "schedule: [{name: d, hot: 10}]\n    autoscale: {}", []string{
			`7:31: pools.p.schedule[0].hot: hot 10 is above the autoscale block's max 5 (line 8; max is not set and 5 is its default), and the autoscaler caps the pool's hot instances at max; set max to at least 10, or lower hot`,
		}},
		{"hot above a written max", "schedule:\n      - name: day\n        match: {day: [monday]}\n        hot: 9\n      - name: d\n        hot: 3\n    autoscale:\n      max: 8", []string{
			`10:14: pools.p.schedule[0].hot: hot 9 is above the autoscale block's max 8 (line 14), and the autoscaler caps the pool's hot instances at max; set max to at least 9, or lower hot`,
		}},
		{"hot at max", "schedule: [{name: d, hot: 8}]\n    autoscale: {max: 8}", nil},
		{"a max already refused is not restated", "schedule: [{name: d, hot: 10}]\n    autoscale: {max: lots}", []string{
			`8:22: pools.p.autoscale.max: expected an integer, got "lots"`,
		}},
		{"a block already refused is not restated", "schedule: [{name: d, hot: 10}]\n    autoscale:", []string{
			`8:15: pools.p.autoscale: expected a mapping for the autoscale block, got nothing`,
		}},
		{"several runners per machine", "autoscale: {runners-per-instance: 4}", []string{
			`7:39: pools.p.autoscale: runners-per-instance must be 1 in a pool's autoscale block, got 4: a pool's machine runs one job at a time (omit the key)`,
		}},
		{"no runner per machine", "autoscale: {runners-per-instance: 0}", []string{
			`7:39: pools.p.autoscale: runners-per-instance must be 1 in a pool's autoscale block, got 0: a pool's machine runs one job at a time (omit the key)`,
		}},
		{"one runner per machine", "autoscale: {runners-per-instance: 1}", nil},
	}
	checkProblems(t, withKeys(poolBase), cases)
}

// Each problem of a block is reported at the value at fault, once: a value
// that does not parse brings no further problems about what it was left at.
func TestAutoscaleProblemsAreAtTheirKeys(t *testing.T) {
	cases := []problemCase{
		{"threshold on a later line", "poll-interval: 30s\n      scale-up-threshold: 1.5\n      scale-down-threshold: 2", []string{
			`10:29: pools.p.autoscale: scale-down-threshold=2.0 must be below scale-up-threshold=1.5, so that a dead zone separates scaling up from scaling down`,
		}},
		{"bad integer", "poll-interval: 30s\n      max: five", []string{
			`9:12: pools.p.autoscale.max: expected an integer, got "five"`,
		}},
		{"bad number read by another check", "scale-up-threshold: high\n      scale-down-threshold: 2", []string{
			`8:27: pools.p.autoscale.scale-up-threshold: expected a number, got "high"`,
		}},
		{"bad duration read by the reach check", "poll-interval: often\n      breach-threshold: 9", []string{
			`8:22: pools.p.autoscale.poll-interval: bad duration "often" (expected a Go duration such as 10m or 1h30m)`,
		}},
		{"a default wrong next to a written value", "min: 7", []string{
			`8:7: pools.p.autoscale: max=5 must be at least 1 and at least min=7 (max is not set: max=5 is the default)`,
		}},
		{"max past the bound", "poll-interval: 30s\n      max: 20000", []string{
			`9:12: pools.p.autoscale: max must be at most 10000, got 20000`,
		}},
	}
	checkProblems(t, func(keys string) string { return autoscaleBase + "      " + keys + "\n" }, cases)
}
