package autoscale

import (
	"math"
	"slices"
	"testing"
	"time"
)

var testEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// at is a test time in seconds after testEpoch; never (-1) is the zero time.
func at(s int64) time.Time {
	if s == never {
		return time.Time{}
	}
	return testEpoch.Add(time.Duration(s) * time.Second)
}

const never = -1

// hist is a State written in seconds, for tables.
type hist struct {
	up, down         []int64
	lastUp, lastDown int64
}

func fresh() hist { return hist{lastUp: never, lastDown: never} }

func (h hist) state() State {
	st := State{LastUp: at(h.lastUp), LastDown: at(h.lastDown)}
	for _, s := range h.up {
		st.UpBreaches = append(st.UpBreaches, at(s))
	}
	for _, s := range h.down {
		st.DownBreaches = append(st.DownBreaches, at(s))
	}
	return st
}

func secs(ts []time.Time) []int64 {
	out := []int64{}
	for _, t := range ts {
		out = append(out, int64(t.Sub(testEpoch)/time.Second))
	}
	return out
}

func lastSecs(t time.Time) int64 {
	if t.IsZero() {
		return never
	}
	return int64(t.Sub(testEpoch) / time.Second)
}

// decideCase is one call of Decide at t=1000 (the tables write history
// relative to that) with the defaults changed by tweak.
type decideCase struct {
	name            string
	tweak           func(*Params)
	before          hist
	demand, current int
	action          string
	newCount        int
	breach          string
	score           float64 // checked when breach != ""
	step            int
	after           hist
	reason          string // checked when not empty
}

const now = 1000

func runDecideCases(t *testing.T, cases []decideCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			if tc.tweak != nil {
				tc.tweak(&p)
			}
			st := tc.before.state()
			d := Decide(p, &st, at(now), tc.demand, tc.current)
			if d.Action != tc.action || d.New != tc.newCount || d.Breach != tc.breach || d.Step != tc.step {
				t.Errorf("got action=%s new=%d breach=%q step=%d, want action=%s new=%d breach=%q step=%d (%s)",
					d.Action, d.New, d.Breach, d.Step, tc.action, tc.newCount, tc.breach, tc.step, d.Reason)
			}
			if d.Capacity != tc.current*p.RunnersPerInstance {
				t.Errorf("capacity %d, want %d", d.Capacity, tc.current*p.RunnersPerInstance)
			}
			if tc.breach != "" && math.Abs(d.Score-tc.score) > 1e-9 {
				t.Errorf("score %.12f, want %.12f", d.Score, tc.score)
			}
			if tc.reason != "" && d.Reason != tc.reason {
				t.Errorf("reason\n got %q\nwant %q", d.Reason, tc.reason)
			}
			gotUp, gotDown := secs(st.UpBreaches), secs(st.DownBreaches)
			wantUp, wantDown := append([]int64{}, tc.after.up...), append([]int64{}, tc.after.down...)
			if !slices.Equal(gotUp, wantUp) || !slices.Equal(gotDown, wantDown) {
				t.Errorf("breaches after: up %v down %v, want up %v down %v", gotUp, gotDown, wantUp, wantDown)
			}
			if lastSecs(st.LastUp) != tc.after.lastUp || lastSecs(st.LastDown) != tc.after.lastDown {
				t.Errorf("last scaling: up %d down %d, want up %d down %d",
					lastSecs(st.LastUp), lastSecs(st.LastDown), tc.after.lastUp, tc.after.lastDown)
			}
		})
	}
}

// Defaults: 1 runner per instance, thresholds 1.5 / 0.25, window 180 s,
// half-life 120 s, breach threshold 1.5, cooldowns 60 s up / 180 s down,
// steps 2 up / 1 down, proportions 0.5, bounds 1..5.
var r2 = math.Pow(0.5, 0.5) // one 60 s poll of decay at a 120 s half-life

func TestDecideBreaches(t *testing.T) {
	runDecideCases(t, []decideCase{
		{name: "demand equal to capacity × up threshold is not a breach",
			before: fresh(), demand: 3, current: 2, action: ActionNone, newCount: 2,
			after: fresh(), reason: "stable: 3 within [0.5, 3.0]"},
		{name: "demand equal to capacity × down threshold is not a breach",
			before: fresh(), demand: 1, current: 4, action: ActionNone, newCount: 4, after: fresh()},
		{name: "one above capacity × up threshold is an up breach",
			before: fresh(), demand: 4, current: 2, action: ActionNone, newCount: 2,
			breach: ActionUp, score: 1, after: hist{up: []int64{now}, lastUp: never, lastDown: never},
			reason: "up: 1 breach in window, score 1.000 < 1.5"},
		{name: "one below capacity × down threshold is a down breach",
			before: fresh(), demand: 0, current: 4, action: ActionNone, newCount: 4,
			breach: ActionDown, score: 1, after: hist{down: []int64{now}, lastUp: never, lastDown: never}},
		{name: "equality survives binary rounding of the up product (100 × 0.29 = 28.999999999999996)",
			tweak:  func(p *Params) { p.ScaleUpThreshold, p.MaxInstances = 0.29, 200 },
			before: fresh(), demand: 29, current: 100, action: ActionNone, newCount: 100, after: fresh()},
		{name: "equality survives binary rounding of the down product (100 × 0.07 = 7.000000000000001)",
			tweak:  func(p *Params) { p.ScaleDownThreshold, p.MaxInstances = 0.07, 200 },
			before: fresh(), demand: 7, current: 100, action: ActionNone, newCount: 100, after: fresh()},
		{name: "zero instances with zero demand is stable, not a down breach",
			tweak:  func(p *Params) { p.MinInstances = 0 },
			before: fresh(), demand: 0, current: 0, action: ActionNone, newCount: 0, after: fresh()},
		{name: "zero instances with any demand is an up breach",
			tweak:  func(p *Params) { p.MinInstances, p.BreachThreshold = 0, 1 },
			before: fresh(), demand: 1, current: 0, action: ActionUp, newCount: 1, step: 1,
			breach: ActionUp, score: 1, after: hist{up: []int64{now}, lastUp: now, lastDown: never}},
		{name: "RUNNERS_PER_INSTANCE=2: capacity 4, demand 5 is stable (not > 6.0, not < 1.0)",
			tweak:  func(p *Params) { p.RunnersPerInstance = 2 },
			before: fresh(), demand: 5, current: 2, action: ActionNone, newCount: 2, after: fresh(),
			reason: "stable: 5 within [1.0, 6.0]"},
		{name: "RUNNERS_PER_INSTANCE=2: capacity 4, demand 8 is an up breach (8 > 6.0)",
			tweak:  func(p *Params) { p.RunnersPerInstance = 2 },
			before: fresh(), demand: 8, current: 2, action: ActionNone, newCount: 2,
			breach: ActionUp, score: 1, after: hist{up: []int64{now}, lastUp: never, lastDown: never}},
	})
}

func TestDecideScoreAndWindow(t *testing.T) {
	exact := func(p *Params) { p.DecayHalfLife = 60 * time.Second } // two polls score exactly 1.5
	runDecideCases(t, []decideCase{
		{name: "score exactly at the threshold triggers",
			tweak:  exact,
			before: hist{up: []int64{940}, lastUp: never, lastDown: never}, demand: 4, current: 1,
			action: ActionUp, newCount: 3, step: 2, breach: ActionUp, score: 1.5,
			after: hist{up: []int64{940, now}, lastUp: now, lastDown: never}},
		{name: "score just below the threshold does not trigger",
			tweak:  exact,
			before: hist{up: []int64{939}, lastUp: never, lastDown: never}, demand: 4, current: 1,
			action: ActionNone, newCount: 1, breach: ActionUp, score: 1 + math.Pow(0.5, 61.0/60),
			after: hist{up: []int64{939, now}, lastUp: never, lastDown: never}},
		{name: "a breach exactly one window old is pruned",
			tweak:  func(p *Params) { p.BreachThreshold = 1.3 },
			before: hist{up: []int64{820}, lastUp: never, lastDown: never}, demand: 4, current: 1,
			action: ActionNone, newCount: 1, breach: ActionUp, score: 1,
			after: hist{up: []int64{now}, lastUp: never, lastDown: never}},
		{name: "a breach a second younger than the window counts",
			tweak:  func(p *Params) { p.BreachThreshold = 1.3 },
			before: hist{up: []int64{821}, lastUp: never, lastDown: never}, demand: 4, current: 1,
			action: ActionUp, newCount: 3, step: 2, breach: ActionUp, score: 1 + math.Pow(0.5, 179.0/120),
			after: hist{up: []int64{821, now}, lastUp: now, lastDown: never}},
		{name: "the other direction's history is pruned too",
			before: hist{up: []int64{700, 900}, down: []int64{800, 820, 821, 990}, lastUp: never, lastDown: never},
			demand: 0, current: 2, action: ActionDown, newCount: 1, step: 1, breach: ActionDown,
			score: math.Pow(0.5, 179.0/120) + math.Pow(0.5, 10.0/120) + 1,
			after: hist{up: []int64{900}, down: []int64{821, 990, now}, lastUp: never, lastDown: now}},
		{name: "a stable poll records nothing and prunes both directions",
			before: hist{up: []int64{800, 950}, down: []int64{810, 960}, lastUp: never, lastDown: never},
			demand: 2, current: 2, action: ActionNone, newCount: 2,
			after: hist{up: []int64{950}, down: []int64{960}, lastUp: never, lastDown: never}},
		{name: "scaling keeps the breach history",
			before: hist{up: []int64{880, 940}, lastUp: never, lastDown: never}, demand: 9, current: 3,
			action: ActionUp, newCount: 5, step: 2, breach: ActionUp, score: 1 + r2 + 0.5,
			after:  hist{up: []int64{880, 940, now}, lastUp: now, lastDown: never},
			reason: "up: 3 breaches in window, score 2.207 >= 1.5, step 2 (deficit 6 × 0.5 / 1 → 3, cap 2), 3 → 5"},
	})
}

func TestDecideCooldowns(t *testing.T) {
	upReady := []int64{940}   // with the breach at now: score 1.707
	downReady := []int64{940} // likewise
	runDecideCases(t, []decideCase{
		{name: "up cooldown active one second before it ends",
			before: hist{up: upReady, lastUp: 941, lastDown: never}, demand: 4, current: 2,
			action: ActionNone, newCount: 2, breach: ActionUp, score: 1 + r2,
			after:  hist{up: []int64{940, now}, lastUp: 941, lastDown: never},
			reason: "up: 2 breaches in window, score 1.707 >= 1.5, blocked: cooldown 1s left"},
		{name: "up cooldown over at exactly its length",
			before: hist{up: upReady, lastUp: 940, lastDown: never}, demand: 4, current: 2,
			action: ActionUp, newCount: 3, step: 1, breach: ActionUp, score: 1 + r2,
			after: hist{up: []int64{940, now}, lastUp: now, lastDown: never}},
		{name: "down cooldown active one second before it ends",
			before: hist{down: downReady, lastUp: never, lastDown: 821}, demand: 0, current: 3,
			action: ActionNone, newCount: 3, breach: ActionDown, score: 1 + r2,
			after: hist{down: []int64{940, now}, lastUp: never, lastDown: 821}},
		{name: "down cooldown over at exactly its length",
			before: hist{down: downReady, lastUp: never, lastDown: 820}, demand: 0, current: 3,
			action: ActionDown, newCount: 2, step: 1, breach: ActionDown, score: 1 + r2,
			after: hist{down: []int64{940, now}, lastUp: never, lastDown: now}},
		{name: "scale up during a down cooldown",
			before: hist{up: upReady, lastUp: never, lastDown: 990}, demand: 4, current: 2,
			action: ActionUp, newCount: 3, step: 1, breach: ActionUp, score: 1 + r2,
			after: hist{up: []int64{940, now}, lastUp: now, lastDown: 990}},
		{name: "scale down during an up cooldown",
			before: hist{down: downReady, lastUp: 990, lastDown: never}, demand: 0, current: 3,
			action: ActionDown, newCount: 2, step: 1, breach: ActionDown, score: 1 + r2,
			after: hist{down: []int64{940, now}, lastUp: 990, lastDown: now}},
		{name: "a zero cooldown never blocks",
			tweak:  func(p *Params) { p.ScaleUpCooldown = 0 },
			before: hist{up: upReady, lastUp: now, lastDown: never}, demand: 4, current: 2,
			action: ActionUp, newCount: 3, step: 1, breach: ActionUp, score: 1 + r2,
			after: hist{up: []int64{940, now}, lastUp: now, lastDown: never}},
	})
}

func TestDecideSteps(t *testing.T) {
	ready := hist{up: []int64{940}, down: []int64{940}, lastUp: never, lastDown: never}
	upAfter := hist{up: []int64{940, now}, down: []int64{940}, lastUp: now, lastDown: never}
	downAfter := hist{up: []int64{940}, down: []int64{940, now}, lastUp: never, lastDown: now}
	bigSteps := func(p *Params) { p.ScaleUpStep, p.ScaleDownStep, p.MaxInstances = 10, 10, 20 }
	score := 1 + r2
	runDecideCases(t, []decideCase{
		{name: "int(x+0.5) rounds a half up: deficit 5 × 0.5 = 2.5 → 3 (Python's round would give 2)",
			tweak: bigSteps, before: ready, demand: 6, current: 1,
			action: ActionUp, newCount: 4, step: 3, breach: ActionUp, score: score, after: upAfter,
			reason: "up: 2 breaches in window, score 1.707 >= 1.5, step 3 (deficit 5 × 0.5 / 1 → 3, cap 10), 1 → 4"},
		{name: "int(x+0.5): deficit 3 × 0.5 = 1.5 → 2",
			tweak: bigSteps, before: ready, demand: 5, current: 2,
			action: ActionUp, newCount: 4, step: 2, breach: ActionUp, score: score, after: upAfter},
		{name: "int(x+0.5): excess 5 × 0.5 = 2.5 → 3",
			tweak: bigSteps, before: ready, demand: 0, current: 5,
			action: ActionDown, newCount: 2, step: 3, breach: ActionDown, score: score, after: downAfter},
		{name: "step at least 1: excess 1 × 0.25 = 0.25 → int(0.75) = 0 → 1",
			tweak:  func(p *Params) { p.ScaleDownProportion, p.ScaleDownThreshold, p.ScaleDownStep = 0.25, 0.8, 3 },
			before: ready, demand: 3, current: 4,
			action: ActionDown, newCount: 3, step: 1, breach: ActionDown, score: score, after: downAfter,
			reason: "down: 2 breaches in window, score 1.707 >= 1.5, step 1 (excess 1 × 0.25 / 1 → 0, cap 3), 4 → 3"},
		{name: "SCALE_UP_STEP caps the step: deficit 9 × 0.5 → 5, cap 2",
			before: ready, demand: 10, current: 1,
			action: ActionUp, newCount: 3, step: 2, breach: ActionUp, score: score, after: upAfter},
		{name: "SCALE_DOWN_STEP caps the step: excess 4 × 0.5 → 2, cap 1",
			before: ready, demand: 0, current: 4,
			action: ActionDown, newCount: 3, step: 1, breach: ActionDown, score: score, after: downAfter},
		{name: "RUNNERS_PER_INSTANCE=2: deficit 4 × 0.5 / 2 = 1 → int(1.5) = 1",
			tweak:  func(p *Params) { p.RunnersPerInstance = 2 },
			before: ready, demand: 8, current: 2,
			action: ActionUp, newCount: 3, step: 1, breach: ActionUp, score: score, after: upAfter,
			reason: "up: 2 breaches in window, score 1.707 >= 1.5, step 1 (deficit 4 × 0.5 / 2 → 1, cap 2), 2 → 3"},
		{name: "RUNNERS_PER_INSTANCE=2: excess 5 × 0.5 / 2 = 1.25 → int(1.75) = 1",
			tweak:  func(p *Params) { p.RunnersPerInstance, p.ScaleDownStep = 2, 3 },
			before: ready, demand: 1, current: 3,
			action: ActionDown, newCount: 2, step: 1, breach: ActionDown, score: score, after: downAfter},
	})
}

func TestDecideBounds(t *testing.T) {
	ready := hist{up: []int64{940}, down: []int64{940}, lastUp: never, lastDown: never}
	breachedUp := hist{up: []int64{940, now}, down: []int64{940}, lastUp: never, lastDown: never}
	breachedDown := hist{up: []int64{940}, down: []int64{940, now}, lastUp: never, lastDown: never}
	score := 1 + r2
	runDecideCases(t, []decideCase{
		{name: "MAX_INSTANCES clamps a step of 2 to 1",
			before: ready, demand: 9, current: 4,
			action: ActionUp, newCount: 5, step: 2, breach: ActionUp, score: score,
			after: hist{up: []int64{940, now}, down: []int64{940}, lastUp: now, lastDown: never}},
		{name: "MIN_INSTANCES clamps a step of 2 to 1",
			tweak:  func(p *Params) { p.ScaleDownStep, p.ScaleDownProportion = 3, 1 },
			before: ready, demand: 0, current: 2,
			action: ActionDown, newCount: 1, step: 2, breach: ActionDown, score: score,
			after: hist{up: []int64{940}, down: []int64{940, now}, lastUp: never, lastDown: now}},
		{name: "at MAX_INSTANCES a triggered scale-up is no action and starts no cooldown",
			before: ready, demand: 9, current: 5,
			action: ActionNone, newCount: 5, breach: ActionUp, score: score, after: breachedUp,
			reason: "up: 2 breaches in window, score 1.707 >= 1.5, already at MAX_INSTANCES=5"},
		{name: "at MIN_INSTANCES a triggered scale-down is no action and starts no cooldown",
			before: ready, demand: 0, current: 1,
			action: ActionNone, newCount: 1, breach: ActionDown, score: score, after: breachedDown,
			reason: "down: 2 breaches in window, score 1.707 >= 1.5, already at MIN_INSTANCES=1"},
		{name: "above MAX_INSTANCES a triggered scale-up does not shrink the count",
			before: ready, demand: 20, current: 7,
			action: ActionNone, newCount: 7, breach: ActionUp, score: score, after: breachedUp,
			reason: "up: 2 breaches in window, score 1.707 >= 1.5, count 7 is above MAX_INSTANCES=5"},
		{name: "below MIN_INSTANCES a triggered scale-down does not grow the count",
			tweak:  func(p *Params) { p.MinInstances = 2 },
			before: ready, demand: 0, current: 1,
			action: ActionNone, newCount: 1, breach: ActionDown, score: score, after: breachedDown,
			reason: "down: 2 breaches in window, score 1.707 >= 1.5, count 1 is below MIN_INSTANCES=2"},
	})
}

// A long run keeps State bounded by the window, whatever the demand does.
func TestDecideStateStaysBounded(t *testing.T) {
	p := DefaultParams()
	var st State
	current := 1
	for i := int64(0); i < 1000; i++ {
		demand := int(i % 7 * 3 % 11)
		current = Decide(p, &st, at(i*60), demand, current).New
		if n := len(st.UpBreaches) + len(st.DownBreaches); n > 3 {
			t.Fatalf("poll %d: %d breaches kept, want at most 3 (one per poll in a 3-poll window)", i, n)
		}
	}
}
