package autoscale

import (
	"math"
	"testing"
	"time"
)

// seedPoll is one line of an example timeline of the specification, with what Decide
// does under the specification's own parameters (nothing ever scales: every score is
// printed so the decay is visible) and under bullpen's defaults.
type seedPoll struct {
	t         int64
	demand    int
	seedScore float64 // breach score with the specification's parameters; 0 when stable
	action    string  // with bullpen's defaults
	newCount  int     // with bullpen's defaults
	score     float64 // with bullpen's defaults; 0 when stable
}

type seedTimeline struct {
	name    string
	initial int
	start   hist
	polls   []seedPoll
}

// The specification's "Scaling Behavior Examples", poll by poll. Where its prose and
// its formulas disagree, the formulas win and the comment says why.
var seedTimelines = []seedTimeline{
	{
		name: "burst of jobs", initial: 1, start: fresh(),
		polls: []seedPoll{
			// "stable": in fact 0 < 1 × 0.25, a down breach; harmless at MIN_INSTANCES=1.
			{t: 0, demand: 0, seedScore: 1, action: ActionNone, newCount: 1, score: 1},
			// "score ~1.0": right.
			{t: 60, demand: 5, seedScore: 1, action: ActionNone, newCount: 1, score: 1},
			// "score ~2.0 → scale to 3": ~2.0 ignores decay. Seed: 1 + 0.5^(60/30) = 1.25 < 2.0, no
			// scaling. bullpen: 1 + 0.5^(60/120) = 1.707 ≥ 1.5; deficit 7 × 0.5 → 4, cap 2 → 3.
			{t: 120, demand: 8, seedScore: 1.25, action: ActionUp, newCount: 3, score: 1 + r2},
			// "scale-up blocked (cooldown)": the 60 s cooldown set at t=120 is over at t=180 (active
			// only while less than 60 s have passed), so bullpen scales again: deficit 3 → 2, 3 → 5.
			// Seed: 1 + 0.25 + 0.0625 = 1.3125, the most its defaults can ever reach.
			{t: 180, demand: 6, seedScore: 1.3125, action: ActionUp, newCount: 5, score: 1 + r2 + 0.5},
			// "cooldown expired, stable (5 < 4.5)": 5 < 4.5 is false; on 3 instances demand 5 is an
			// up breach (5 > 4.5). bullpen has 5 instances by now: 5 is within [1.25, 7.5].
			{t: 240, demand: 5, seedScore: 1.3125, action: ActionNone, newCount: 5, score: 0},
		},
	},
	{
		name: "jobs complete", initial: 3, start: fresh(),
		polls: []seedPoll{
			{t: 0, demand: 3, action: ActionNone, newCount: 3},
			// "stable (1 > 0.75)": right.
			{t: 60, demand: 1, action: ActionNone, newCount: 3},
			{t: 120, demand: 0, seedScore: 1, action: ActionNone, newCount: 3, score: 1},
			// "score ~2.0 → scale to 2": seed 1.25, no scaling; bullpen 1.707, excess 3 → 2, cap 1.
			{t: 180, demand: 0, seedScore: 1.25, action: ActionDown, newCount: 2, score: 1 + r2},
			// The seed elides these two polls ("..."); its loop polls every 60 s, and the
			// 180 s down cooldown blocks both.
			{t: 240, demand: 0, seedScore: 1.3125, action: ActionNone, newCount: 2, score: 1 + r2 + 0.5},
			{t: 300, demand: 0, seedScore: 1.3125, action: ActionNone, newCount: 2, score: 1 + r2 + 0.5},
			// "cooldown expired, breach score ~2.0 → scale to 1": the cooldown ends exactly now;
			// the score is that of the breaches at 240, 300 and 360.
			{t: 360, demand: 0, seedScore: 1.3125, action: ActionDown, newCount: 1, score: 1 + r2 + 0.5},
		},
	},
	{
		// The same, polling only where the specification's text shows a poll: at t=360 the breaches at
		// t=120 and t=180 are at least one window old and pruned, so the "~2.0" is 1.0.
		name: "jobs complete, only the polls the specification shows", initial: 3, start: fresh(),
		polls: []seedPoll{
			{t: 0, demand: 3, action: ActionNone, newCount: 3},
			{t: 60, demand: 1, action: ActionNone, newCount: 3},
			{t: 120, demand: 0, seedScore: 1, action: ActionNone, newCount: 3, score: 1},
			{t: 180, demand: 0, seedScore: 1.25, action: ActionDown, newCount: 2, score: 1 + r2},
			{t: 360, demand: 0, seedScore: 1, action: ActionNone, newCount: 2, score: 1},
		},
	},
	{
		// "t=0: instances=3, just scaled down".
		name: "rapid response to load spike", initial: 3, start: hist{lastUp: never, lastDown: 0},
		polls: []seedPoll{
			// "scale-up allowed (down cooldown doesn't block up), breach recorded (score ~1.0)".
			{t: 30, demand: 10, seedScore: 1, action: ActionNone, newCount: 3, score: 1},
			// "score ~2.0 → scale to 5": seed 1.25, no scaling; bullpen 1.707 while the down
			// cooldown (until t=180) is active; deficit 9 × 0.5 → 5, cap 2 → 5.
			{t: 90, demand: 12, seedScore: 1.25, action: ActionUp, newCount: 5, score: 1 + r2},
		},
	},
}

func TestSeedTimelines(t *testing.T) {
	for _, tl := range seedTimelines {
		t.Run(tl.name+"/seed parameters", func(t *testing.T) {
			runSeedTimeline(t, SeedParams(), tl, true)
		})
		t.Run(tl.name+"/bullpen defaults", func(t *testing.T) {
			runSeedTimeline(t, DefaultParams(), tl, false)
		})
	}
}

func runSeedTimeline(t *testing.T, p Params, tl seedTimeline, seed bool) {
	t.Helper()
	st := tl.start.state()
	current := tl.initial
	for _, poll := range tl.polls {
		d := Decide(p, &st, at(poll.t), poll.demand, current)
		wantAction, wantNew, wantScore := poll.action, poll.newCount, poll.score
		if seed {
			// With a 60 s poll and a 30 s half-life nothing ever reaches 2.0.
			wantAction, wantNew, wantScore = ActionNone, tl.initial, poll.seedScore
		}
		if d.Action != wantAction || d.New != wantNew || math.Abs(d.Score-wantScore) > 1e-9 {
			t.Errorf("t=%d demand=%d current=%d: got %s → %d score %.4f, want %s → %d score %.4f (%s)",
				poll.t, poll.demand, current, d.Action, d.New, d.Score, wantAction, wantNew, wantScore, d.Reason)
		}
		current = d.New
	}
}

// SeedParams are the specification's defaults exactly as its table gives them. They
// do not validate: their threshold is unreachable (see DefaultParams).
func SeedParams() Params {
	p := DefaultParams()
	p.DecayHalfLife = 30 * time.Second
	p.BreachThreshold = 2.0
	return p
}
