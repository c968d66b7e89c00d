package autoscale

import (
	"fmt"
	"math"
	"time"
)

// Actions a Decision can take.
const (
	ActionUp   = "up"
	ActionDown = "down"
	ActionNone = "none"
)

// scoreTolerance absorbs floating-point error where the specification compares
// decimal numbers: a score that is mathematically equal to the threshold
// triggers, and a demand mathematically equal to capacity × threshold is not
// a breach even when the binary product comes out a hair off (100 × 0.29 is
// 28.999999999999996).
const scoreTolerance = 1e-9

// State is the autoscaler's memory between polls. The zero value is a fresh
// start; Decide keeps it bounded by pruning both histories on every call.
type State struct {
	UpBreaches   []time.Time // up breaches still inside the window
	DownBreaches []time.Time // down breaches still inside the window
	LastUp       time.Time   // last scale-up; zero if none
	LastDown     time.Time   // last scale-down; zero if none
}

// Decision is the outcome of one poll.
type Decision struct {
	Action   string  // ActionUp, ActionDown or ActionNone
	New      int     // the count to run; equals current unless scaling
	Breach   string  // ActionUp or ActionDown if a breach was recorded, else ""
	Breaches int     // breaches of that direction now in the window
	Score    float64 // breach score of that direction; 0 without a breach
	Capacity int     // current × RUNNERS_PER_INSTANCE
	Step     int     // instances added or removed; 0 without scaling
	Reason   string  // one line for logs and people
	// Capped is a scale-up triggered that MAX_INSTANCES turned into no
	// action: demand asks for more than the count may be.
	Capped bool
}

// direction bundles what differs between scaling up and scaling down.
type direction struct {
	name     string
	breaches *[]time.Time
	last     *time.Time
	cooldown time.Duration
}

// Decide records this poll's breach, if any, in st and says whether to
// scale, following the demand autoscaler's formulas with the open points DESIGN fixes:
//
//   - capacity = current × RUNNERS_PER_INSTANCE; an up breach when demand >
//     capacity × SCALE_UP_THRESHOLD, otherwise a down breach when demand <
//     capacity × SCALE_DOWN_THRESHOLD, otherwise nothing is recorded;
//   - the breach is recorded at now, breaches at or before now − window are
//     pruned (both directions, so st stays bounded), and the score is
//     Σ 0.5^((now − tᵢ)/DECAY_HALF_LIFE_SECONDS) over that direction's rest;
//   - scaling triggers when score ≥ BREACH_THRESHOLD unless that direction
//     scaled less than its cooldown ago;
//   - the step and the new count are the specification's formulas, int(x + 0.5)
//     included; a decision that would not move the count toward its
//     direction is no action and starts no cooldown; scaling keeps the
//     breach history.
//
// now must not go backwards between calls on the same st.
func Decide(p Params, st *State, now time.Time, demand, current int) Decision {
	return decideAbove(p, st, now, demand, current, p.MinInstances)
}

// decideAbove is Decide with a scale-down bounded by lower rather than by
// MIN_INSTANCES alone: a pool's schedule keeps its hot value whatever the
// autoscaler decides, so a scale-down below it would change nothing and
// only start a cooldown. lower is at least p.MinInstances.
func decideAbove(p Params, st *State, now time.Time, demand, current, lower int) Decision {
	capacity := current * p.RunnersPerInstance
	d := Decision{Action: ActionNone, New: current, Capacity: capacity}
	upLimit := float64(capacity) * p.ScaleUpThreshold
	downLimit := float64(capacity) * p.ScaleDownThreshold

	var dir direction
	switch {
	case upBreach(p, demand, current):
		dir = direction{ActionUp, &st.UpBreaches, &st.LastUp, p.ScaleUpCooldown}
	case float64(demand) < downLimit-scoreTolerance:
		dir = direction{ActionDown, &st.DownBreaches, &st.LastDown, p.ScaleDownCooldown}
	}
	if dir.name != "" {
		*dir.breaches = append(*dir.breaches, now)
	}
	cutoff := now.Add(-p.StabilizationWindow)
	st.UpBreaches = prune(st.UpBreaches, cutoff)
	st.DownBreaches = prune(st.DownBreaches, cutoff)
	if dir.name == "" {
		d.Reason = fmt.Sprintf("stable: %d within [%s, %s]", demand, num(downLimit), num(upLimit))
		return d
	}

	d.Breach = dir.name
	d.Breaches = len(*dir.breaches)
	d.Score = score(*dir.breaches, now, p.DecayHalfLife)
	head := fmt.Sprintf("%s: %d %s in window, score %.3f", dir.name, d.Breaches, plural(d.Breaches, "breach", "breaches"), d.Score)
	if d.Score < p.BreachThreshold-scoreTolerance {
		d.Reason = fmt.Sprintf("%s < %s", head, num(p.BreachThreshold))
		return d
	}
	head = fmt.Sprintf("%s >= %s", head, num(p.BreachThreshold))
	if !dir.last.IsZero() {
		if since := now.Sub(*dir.last); since < dir.cooldown {
			d.Reason = fmt.Sprintf("%s, blocked: cooldown %ss left", head, seconds(wholeSecondsUp(dir.cooldown-since)))
			return d
		}
	}

	var newCount, step int
	var working string
	if dir.name == ActionUp {
		newCount, step, working = scaleUp(p, demand, capacity, current)
	} else {
		newCount, step, working = scaleDown(p, demand, capacity, current, lower)
	}
	if (dir.name == ActionUp && newCount <= current) || (dir.name == ActionDown && newCount >= current) {
		d.Capped = dir.name == ActionUp
		d.Reason = fmt.Sprintf("%s, %s", head, boundReason(p, dir.name, current, lower))
		return d
	}
	*dir.last = now
	d.Action, d.New, d.Step = dir.name, newCount, step
	d.Reason = fmt.Sprintf("%s, step %d (%s), %d → %d", head, step, working, current, newCount)
	return d
}

// upBreach says whether demand on current instances is an up breach.
func upBreach(p Params, demand, current int) bool {
	return float64(demand) > float64(current*p.RunnersPerInstance)*p.ScaleUpThreshold+scoreTolerance
}

// wholeSecondsUp rounds d up to whole seconds, for people: polls come at
// any instant, and a cooldown with a fraction of a second left is not over.
func wholeSecondsUp(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

// scaleUp is the specification's scale-up formula; working shows its arithmetic.
func scaleUp(p Params, demand, capacity, current int) (newCount, step int, working string) {
	deficit := demand - capacity
	raw := int(float64(deficit)*p.ScaleUpProportion/float64(p.RunnersPerInstance) + 0.5)
	step = min(max(raw, 1), p.ScaleUpStep)
	working = fmt.Sprintf("deficit %d × %s / %d → %d, cap %d", deficit, num(p.ScaleUpProportion), p.RunnersPerInstance, raw, p.ScaleUpStep)
	return min(current+step, p.MaxInstances), step, working
}

// scaleDown is the specification's scale-down formula, bounded by lower;
// working shows its arithmetic.
func scaleDown(p Params, demand, capacity, current, lower int) (newCount, step int, working string) {
	excess := capacity - demand
	raw := int(float64(excess)*p.ScaleDownProportion/float64(p.RunnersPerInstance) + 0.5)
	step = min(max(raw, 1), p.ScaleDownStep)
	working = fmt.Sprintf("excess %d × %s / %d → %d, cap %d", excess, num(p.ScaleDownProportion), p.RunnersPerInstance, raw, p.ScaleDownStep)
	return max(current-step, lower), step, working
}

// boundReason explains a triggered decision that the bounds turned into no
// action. A count already outside the bounds is not dragged back by a
// decision in the other direction: the specification's formula would, say, "scale
// up" from 7 to a MAX_INSTANCES of 5, which bullpen refuses to call a
// scale-up.
func boundReason(p Params, name string, current, lower int) string {
	if name == ActionUp {
		if current == p.MaxInstances {
			return fmt.Sprintf("already at MAX_INSTANCES=%d", p.MaxInstances)
		}
		return fmt.Sprintf("count %d is above MAX_INSTANCES=%d", current, p.MaxInstances)
	}
	if lower > p.MinInstances && current == lower {
		return fmt.Sprintf("already at the schedule's hot value %d", lower)
	}
	if current == p.MinInstances {
		return fmt.Sprintf("already at MIN_INSTANCES=%d", p.MinInstances)
	}
	return fmt.Sprintf("count %d is below MIN_INSTANCES=%d", current, p.MinInstances)
}

// prune drops breaches at or before cutoff, in place.
func prune(breaches []time.Time, cutoff time.Time) []time.Time {
	kept := breaches[:0]
	for _, t := range breaches {
		if t.After(cutoff) {
			kept = append(kept, t)
		}
	}
	return kept
}

// score is Σ 0.5^(age/halfLife) over breaches.
func score(breaches []time.Time, now time.Time, halfLife time.Duration) float64 {
	sum := 0.0
	for _, t := range breaches {
		sum += math.Pow(0.5, float64(now.Sub(t))/float64(halfLife))
	}
	return sum
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
