package autoscale

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// StepAllowancePercent is the share of a loop's interval, in percent, set
// aside for the work of each step. Polls ride on loops (the standalone
// autoscaler waits POLL_INTERVAL after its API calls; a pool's autoscaler
// polls on the converger's cycles, which start an interval apart unless a
// cycle overruns), so real polls come further apart than the interval
// says, and a threshold that polls exactly one interval apart reach only
// just is never reached at all.
const StepAllowancePercent = 10

// Cadence is how far apart polls come, at worst, when they ride on a loop.
type Cadence struct {
	Every  time.Duration // the loop's interval
	Cycles int64         // steps per poll: ceil(POLL_INTERVAL / Every), at least 1
	Gap    time.Duration // the longest time between two polls, the steps' work included
	Best   float64       // the highest score of a breach sustained at that gap
	Sum    string        // Best's arithmetic, for people
	// Reaches says whether Best meets BREACH_THRESHOLD.
	Reaches bool
}

// CadenceOn is the cadence of polls riding on a loop of interval every,
// a step taking up to StepAllowancePercent of every beyond it. A poll is due
// at the first step at least POLL_INTERVAL after the last poll, so polls
// come every ceil(POLL_INTERVAL / (every + step)) steps; slower steps can
// only lower that count, so two polls are at most
// ceil(POLL_INTERVAL / every) × (every + its allowance) apart. p must
// be valid (Validate) and every positive.
func (p Params) CadenceOn(every time.Duration) Cadence {
	cycles := max(int64((p.PollInterval+every-1)/every), 1)
	gap := time.Duration(cycles) * (every + every*StepAllowancePercent/100)
	best, sum := p.sustained(gap)
	return Cadence{Every: every, Cycles: cycles, Gap: gap, Best: best, Sum: sum, Reaches: best >= p.BreachThreshold-scoreTolerance}
}

// SafeThreshold is the highest threshold, to two decimals, that this
// cadence reaches.
func (c Cadence) SafeThreshold() float64 { return math.Floor(c.Best*100+scoreTolerance) / 100 }

// CadenceError lists the pools whose autoscaler could never scale at the
// converger's cadence, one problem each, naming the pool and the fix.
type CadenceError struct {
	Problems []string
}

func (e *CadenceError) Error() string {
	return "autoscale blocks that would never scale: " + strings.Join(e.Problems, "; ")
}

// CheckCadence checks, for every pool with an autoscale block, that a
// sustained breach reaches its breach-threshold when the converger cycles
// every (serve's --converge-every). A pool's autoscaler
// polls only on converger cycles, so its polls come every
// ceil(poll-interval / every) cycles, not every poll-interval, plus each
// cycle's own work (StepAllowancePercent): a block that validates on its own
// (Params.ValidateFloor) may never scale under serve. It returns a
// *CadenceError naming each such pool, the interval its polls really
// come at and what to change; nil when every block is reachable. Blocks
// that do not validate on their own are left to that validation.
func CheckCadence(pools []domain.Pool, every time.Duration) error {
	if every <= 0 {
		return nil
	}
	var probs []string
	for _, pool := range pools {
		if pool.Autoscale == nil {
			continue
		}
		p := ParamsOf(*pool.Autoscale)
		if p.ValidateFloor(0) != nil {
			continue
		}
		if c := p.CadenceOn(every); !c.Reaches {
			probs = append(probs, cadenceProblem(pool.Name, p, c))
		}
	}
	if len(probs) > 0 {
		return &CadenceError{Problems: probs}
	}
	return nil
}

// cadenceProblem says why pool's block never scales at cadence c, and
// what would: a poll-interval of fewer cycles, when one suffices, or a
// lower breach-threshold.
func cadenceProblem(pool string, p Params, c Cadence) string {
	polls := "on every cycle"
	if c.Cycles > 1 {
		polls = fmt.Sprintf("on every %s cycle", ordinal(c.Cycles))
	}
	fix := fmt.Sprintf("run the converger more often (--converge-every) or lower breach-threshold to %s", num(c.SafeThreshold()))
	for n := c.Cycles - 1; n >= 1; n-- {
		q := p
		q.PollInterval = time.Duration(n) * c.Every
		if q.CadenceOn(c.Every).Reaches {
			fix = fmt.Sprintf("set poll-interval to %ss or less, a multiple of the converger's interval, or lower breach-threshold to %s",
				seconds(q.PollInterval), num(c.SafeThreshold()))
			break
		}
	}
	return fmt.Sprintf("pool %q: breach-threshold %s is never reached with the converger running every %ss: "+
		"poll-interval %ss polls %s, up to %ss apart when each cycle's work takes %d%% of its interval, "+
		"where a sustained breach scores at most %s; %s",
		pool, num(p.BreachThreshold), seconds(c.Every), seconds(p.PollInterval), polls, seconds(c.Gap),
		StepAllowancePercent, c.Sum, fix)
}

func ordinal(n int64) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// LateProblem checks p for the standalone autoscaler, whose loop waits
// POLL_INTERVAL after each poll's API calls, so that polls come up to
// StepAllowancePercent later than POLL_INTERVAL: a BREACH_THRESHOLD that
// only polls exactly POLL_INTERVAL apart reach (Validate accepts it) is
// never reached by the running loop. ok is false with the problem, naming
// the fix, when so. p must be valid.
func (p Params) LateProblem() (pr Problem, ok bool) {
	c := p.CadenceOn(p.PollInterval)
	if c.Reaches {
		return Problem{}, true
	}
	fix := fmt.Sprintf("lower %s to %s", EnvBreachThreshold, num(c.SafeThreshold()))
	for q := p.PollInterval.Truncate(time.Second) - time.Second; q >= time.Second; q -= time.Second {
		shorter := p
		shorter.PollInterval = q
		if shorter.CadenceOn(q).Reaches {
			fix += fmt.Sprintf(", or %s to %s", EnvPollInterval, seconds(q))
			break
		}
	}
	reason := fmt.Sprintf("is never reached once polls run late: the autoscaler waits %s=%ss after each poll's API calls, "+
		"so polls come up to %ss apart when those calls take %d%% of it, where a sustained breach scores at most %s; %s",
		EnvPollInterval, seconds(p.PollInterval), seconds(c.Gap), StepAllowancePercent, c.Sum, fix)
	return Problem{Param: EnvBreachThreshold, Value: num(p.BreachThreshold), Reason: reason}, false
}
