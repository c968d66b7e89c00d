package autoscale

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Environment variable names of the demand autoscaler's configuration table. They are
// also the names problems are reported under, whatever the source.
const (
	EnvRunnersPerInstance  = "RUNNERS_PER_INSTANCE"
	EnvMinInstances        = "MIN_INSTANCES"
	EnvMaxInstances        = "MAX_INSTANCES"
	EnvPollInterval        = "POLL_INTERVAL"
	EnvScaleUpThreshold    = "SCALE_UP_THRESHOLD"
	EnvScaleDownThreshold  = "SCALE_DOWN_THRESHOLD"
	EnvScaleUpCooldown     = "SCALE_UP_COOLDOWN"
	EnvScaleDownCooldown   = "SCALE_DOWN_COOLDOWN"
	EnvScaleUpStep         = "SCALE_UP_STEP"
	EnvScaleDownStep       = "SCALE_DOWN_STEP"
	EnvScaleUpProportion   = "SCALE_UP_PROPORTION"
	EnvScaleDownProportion = "SCALE_DOWN_PROPORTION"
	EnvStabilizationWindow = "STABILIZATION_WINDOW_MINUTES"
	EnvDecayHalfLife       = "DECAY_HALF_LIFE_SECONDS"
	EnvBreachThreshold     = "BREACH_THRESHOLD"
)

// Params are the tunables of the demand autoscaler.
type Params struct {
	RunnersPerInstance  int           // runner processes per instance
	MinInstances        int           // lower bound of the count
	MaxInstances        int           // upper bound of the count
	PollInterval        time.Duration // time between polls
	ScaleUpThreshold    float64       // up breach when demand > capacity × this
	ScaleDownThreshold  float64       // down breach when demand < capacity × this
	ScaleUpCooldown     time.Duration // no second scale-up sooner than this
	ScaleDownCooldown   time.Duration // no second scale-down sooner than this
	ScaleUpStep         int           // most instances added at once
	ScaleDownStep       int           // most instances removed at once
	ScaleUpProportion   float64       // fraction of the runner deficit to add
	ScaleDownProportion float64       // fraction of the runner excess to remove
	StabilizationWindow time.Duration // breaches older than this are forgotten
	DecayHalfLife       time.Duration // a breach's weight halves every this long
	BreachThreshold     float64       // score that triggers scaling
}

// DefaultParams are the demand autoscaler's defaults with two departures, because the
// seed's own defaults never scale: with a 60 s poll, a 30 s half-life and a
// 3 minute window a sustained breach scores at most 1 + 0.25 + 0.0625 =
// 1.3125, short of the 2.0 threshold.
//
// The specification's timelines scale on the second consecutive breach ("score ~2.0
// → scale"). No half-life gets two decayed breaches to 2.0 (1 + 0.5^(60/h)
// < 2 for every finite h), so the threshold has to come down. A threshold
// of 1.5 with a 60 s half-life would be met exactly by two polls 60 s
// apart, and missed whenever a poll runs late, as real polls do (the loop
// sleeps POLL_INTERVAL after its API calls). Hence:
//
//   - DECAY_HALF_LIFE_SECONDS = 120 (seed: 30)
//   - BREACH_THRESHOLD = 1.5 (seed: 2.0)
//
// One breach (1.0) never scales; two breaches up to 120 s apart do (1.707 at
// 60 s apart, exactly 1.5 at 120 s), which keeps the specification's timelines and is
// stricter than its intent, where any two breaches in the window added up
// to 2.0. A sustained breach scores at most 1 + 0.707 + 0.5 = 2.207.
func DefaultParams() Params {
	return Params{
		RunnersPerInstance:  1,
		MinInstances:        1,
		MaxInstances:        5,
		PollInterval:        60 * time.Second,
		ScaleUpThreshold:    1.5,
		ScaleDownThreshold:  0.25,
		ScaleUpCooldown:     60 * time.Second,
		ScaleDownCooldown:   180 * time.Second,
		ScaleUpStep:         2,
		ScaleDownStep:       1,
		ScaleUpProportion:   0.5,
		ScaleDownProportion: 0.5,
		StabilizationWindow: 3 * time.Minute,
		DecayHalfLife:       120 * time.Second,
		BreachThreshold:     1.5,
	}
}

// Problem is one thing wrong with one parameter.
type Problem struct {
	Param  string // the specification's environment variable name
	Value  string // the value as given or as it reads back
	Reason string // what is wrong and what was expected
}

func (p Problem) String() string { return p.Param + "=" + p.Value + " " + p.Reason }

// ParamsError lists every problem found in a set of parameters.
type ParamsError struct {
	Problems []Problem
}

func (e *ParamsError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return "invalid autoscaler parameters: " + strings.Join(lines, "; ")
}

// Validate checks p for the standalone App Platform mode, where
// MIN_INSTANCES must be at least 1.
func (p Params) Validate() error { return p.ValidateFloor(1) }

// ValidateFloor checks p with minFloor as the lowest allowed MIN_INSTANCES
// (0 lets a pool scale to nothing) and reports every problem at once in a
// *ParamsError.
func (p Params) ValidateFloor(minFloor int) error {
	if probs := p.problems(minFloor, nil); len(probs) > 0 {
		return &ParamsError{Problems: probs}
	}
	return nil
}

// problems checks every parameter not in skip (parameters that failed to
// parse, whose values mean nothing).
func (p Params) problems(minFloor int, skip map[string]bool) []Problem {
	var out []Problem
	check := func(name string, ok bool, value, reason string) {
		if !skip[name] && !ok {
			out = append(out, Problem{Param: name, Value: value, Reason: reason})
		}
	}
	check(EnvRunnersPerInstance, p.RunnersPerInstance >= 1, strconv.Itoa(p.RunnersPerInstance), "must be at least 1")
	check(EnvMinInstances, p.MinInstances >= minFloor, strconv.Itoa(p.MinInstances), minReason(minFloor))
	check(EnvMaxInstances, p.MaxInstances >= max(p.MinInstances, 1), strconv.Itoa(p.MaxInstances),
		fmt.Sprintf("must be at least 1 and at least MIN_INSTANCES=%d", p.MinInstances))
	check(EnvPollInterval, p.PollInterval > 0, seconds(p.PollInterval)+"s", "must be more than 0 seconds")
	check(EnvScaleUpThreshold, p.ScaleUpThreshold > 0 && finite(p.ScaleUpThreshold), num(p.ScaleUpThreshold), "must be more than 0")
	check(EnvScaleDownThreshold, p.ScaleDownThreshold >= 0 && finite(p.ScaleDownThreshold), num(p.ScaleDownThreshold), "must be 0 or more")
	if !skip[EnvScaleUpThreshold] && p.ScaleUpThreshold > 0 && finite(p.ScaleUpThreshold) {
		check(EnvScaleDownThreshold, !(p.ScaleDownThreshold >= p.ScaleUpThreshold), num(p.ScaleDownThreshold),
			fmt.Sprintf("must be below SCALE_UP_THRESHOLD=%s, so that a dead zone separates scaling up from scaling down", num(p.ScaleUpThreshold)))
	}
	check(EnvScaleUpCooldown, p.ScaleUpCooldown >= 0, seconds(p.ScaleUpCooldown)+"s", "must be 0 seconds or more")
	check(EnvScaleDownCooldown, p.ScaleDownCooldown >= 0, seconds(p.ScaleDownCooldown)+"s", "must be 0 seconds or more")
	check(EnvScaleUpStep, p.ScaleUpStep >= 1, strconv.Itoa(p.ScaleUpStep), "must be at least 1")
	check(EnvScaleDownStep, p.ScaleDownStep >= 1, strconv.Itoa(p.ScaleDownStep), "must be at least 1")
	check(EnvScaleUpProportion, p.ScaleUpProportion > 0 && finite(p.ScaleUpProportion), num(p.ScaleUpProportion), "must be more than 0")
	check(EnvScaleDownProportion, p.ScaleDownProportion > 0 && finite(p.ScaleDownProportion), num(p.ScaleDownProportion), "must be more than 0")
	check(EnvStabilizationWindow, p.StabilizationWindow > 0, minutes(p.StabilizationWindow), "must be more than 0 minutes")
	check(EnvDecayHalfLife, p.DecayHalfLife > 0, seconds(p.DecayHalfLife), "must be more than 0 seconds")
	check(EnvBreachThreshold, p.BreachThreshold > 0 && finite(p.BreachThreshold), num(p.BreachThreshold), "must be more than 0")
	if !touchesReach(out, skip) {
		if pr, ok := p.reachProblem(); !ok {
			out = append(out, pr)
		}
	}
	return out
}

func minReason(floor int) string {
	if floor >= 1 {
		return fmt.Sprintf("must be at least %d (DigitalOcean App Platform requires at least one instance)", floor)
	}
	return fmt.Sprintf("must be at least %d", floor)
}

// touchesReach reports whether any input of the reachability check is
// already known bad, in which case that check would only add noise.
func touchesReach(probs []Problem, skip map[string]bool) bool {
	for _, name := range []string{EnvPollInterval, EnvStabilizationWindow, EnvDecayHalfLife, EnvBreachThreshold} {
		if skip[name] {
			return true
		}
		for _, p := range probs {
			if p.Param == name {
				return true
			}
		}
	}
	return false
}

// reachProblem checks that a sustained breach, one recorded at every poll,
// can reach BREACH_THRESHOLD when polls come exactly POLL_INTERVAL apart.
func (p Params) reachProblem() (Problem, bool) {
	best, arithmetic := p.sustained(p.PollInterval)
	if best >= p.BreachThreshold-scoreTolerance {
		return Problem{}, true
	}
	reason := fmt.Sprintf("is unreachable: with %s=%ss, %s=%s and %s=%s, a sustained breach scores at most %s",
		EnvPollInterval, seconds(p.PollInterval), EnvDecayHalfLife, seconds(p.DecayHalfLife),
		EnvStabilizationWindow, minutes(p.StabilizationWindow), arithmetic)
	return Problem{Param: EnvBreachThreshold, Value: num(p.BreachThreshold), Reason: reason}, false
}

// sustained is the highest score of a breach recorded at every poll, polls
// gap apart, and its arithmetic for people. A breach at or before
// t − window is pruned, so the breaches still counted at t are those k
// polls back for k = 0..K with K = ceil(window/gap) − 1, and the score is
// Σ_{k=0..K} 0.5^(k·gap/halfLife).
func (p Params) sustained(gap time.Duration) (best float64, arithmetic string) {
	k := int64((p.StabilizationWindow - 1) / gap)
	ratio := math.Pow(0.5, float64(gap)/float64(p.DecayHalfLife))
	best = sustainedMax(ratio, k)
	if k == 0 {
		return best, "1, the latest breach alone, as the window is no longer than one poll"
	}
	return best, sumTerms(ratio, k) + " = " + short(best)
}

// sustainedMax is Σ_{k=0..n} ratio^k, summed term by term (as Decide sums
// them) unless the window holds so many polls that the closed form is due.
func sustainedMax(ratio float64, n int64) float64 {
	if n > 10000 {
		return (1 - math.Pow(ratio, float64(n+1))) / (1 - ratio)
	}
	sum := 0.0
	for k := int64(0); k <= n; k++ {
		sum += math.Pow(ratio, float64(k))
	}
	return sum
}

// sumTerms writes the series out, eliding the middle of a long one.
func sumTerms(ratio float64, n int64) string {
	term := func(k int64) string { return short(math.Pow(ratio, float64(k))) }
	if n < 6 {
		terms := make([]string, 0, n+1)
		for k := int64(0); k <= n; k++ {
			terms = append(terms, term(k))
		}
		return strings.Join(terms, " + ")
	}
	return fmt.Sprintf("%s + %s + %s + … + %s (%d breaches)", term(0), term(1), term(2), term(n), n+1)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// num formats a multiplier or threshold the way the specification writes them: 2.0,
// 1.5, 0.25.
func num(x float64) string {
	s := strconv.FormatFloat(x, 'f', -1, 64)
	if finite(x) && !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// short rounds to four decimals for arithmetic shown to people.
func short(x float64) string {
	s := strconv.FormatFloat(x, 'f', 4, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }
func minutes(d time.Duration) string { return strconv.FormatFloat(d.Minutes(), 'f', -1, 64) }
