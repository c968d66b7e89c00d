package demo

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Pace is how well the control plane's loops kept up with a scaled clock.
// There a step's own work (store queries, the simulated cloud's answers)
// takes real time, which the clock multiplies by the speed: at 600× a
// cycle of 10 ms is 6 s of virtual time in which the simulated machines
// moved on and the control plane did not. Queue times then grow by as
// much, cycles go missing and the run ends later than asked, with pools
// caught mid-change.
type Pace struct {
	Speed float64 `json:"speed"`
	// MaxLagSeconds is the most virtual time a converger cycle lagged:
	// begun that long after its due time, or taking that long.
	MaxLagSeconds float64 `json:"max_lag_seconds"`
	// LateCycles counts the cycles that lagged more than a second.
	LateCycles int `json:"late_cycles"`
	// Cycles is how many ran; ExpectedCycles how many the virtual time
	// from the start to the run's end (or its stop, if sooner) holds.
	Cycles         int `json:"cycles"`
	ExpectedCycles int `json:"expected_cycles"`
	// OvershootSeconds is how far past its end (or the moment it was
	// stopped) virtual time ran before the loops had stopped.
	OvershootSeconds float64 `json:"overshoot_seconds"`
}

// lagAllowance is the lag of a cycle, in virtual time, beyond which it
// counts as late: a second is a third of a pool job's queue time in the
// demo, more than its figures (shown to a tenth of a second) can hide.
const lagAllowance = time.Second

// lateShare: a warning takes at least one cycle in lateShare to be late.
// One late cycle alone is a pause of the process (a garbage collection,
// another program's burst), which a real control plane has too.
const lateShare = 4

// pace gathers what Pace reports, as the run goes.
type pace struct {
	speed      float64
	start, end time.Time
	interval   time.Duration

	mu       sync.Mutex
	last     time.Time // when the last cycle began
	cycles   int
	maxLag   time.Duration
	late     int
	stopping time.Time // when the driver asked the loops to stop
}

func newPace(speed float64, start, end time.Time, interval time.Duration) *pace {
	return &pace{speed: speed, start: start, end: end, interval: interval}
}

// cycle notes a converger cycle that began at began and was reported at
// reported. The first is due at the start: virtual time runs while the
// world is set up, and that much less of the run has a control plane.
// Each later one is due an interval after the one before began, as the
// loop starts its steps.
func (p *pace) cycle(began, reported time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	due := p.start
	if p.cycles > 0 {
		due = p.last.Add(p.interval)
	}
	lag := max(began.Sub(due), reported.Sub(began), 0)
	p.cycles++
	p.last = began
	p.maxLag = max(p.maxLag, lag)
	if lag > lagAllowance {
		p.late++
	}
}

// stop notes the virtual time at which the driver asked the loops to stop.
func (p *pace) stop(at time.Time) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopping = at
}

// report sums up a run whose loops had stopped at ended, with a warning
// when its figures are skewed: a quarter of the cycles or more late, a
// cycle missed, or the run past its end by more than lagAllowance.
func (p *pace) report(ended time.Time) (*Pace, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	stopAt := p.stopping
	if stopAt.IsZero() || stopAt.After(p.end) {
		stopAt = p.end // an end timer that fired late overshot too
	}
	covered := max(stopAt.Sub(p.start), 0)
	r := &Pace{
		Speed: p.speed, MaxLagSeconds: round1(p.maxLag.Seconds()), LateCycles: p.late, Cycles: p.cycles,
		ExpectedCycles:   int((covered + p.interval - 1) / p.interval),
		OvershootSeconds: round1(max(ended.Sub(stopAt), 0).Seconds()),
	}
	var why []string
	if p.late > 0 && p.late*lateShare >= p.cycles {
		why = append(why, fmt.Sprintf("%d of %d cycles up to %s late", p.late, p.cycles, shown(p.maxLag)))
	}
	if missed := r.ExpectedCycles - r.Cycles; missed > 0 {
		why = append(why, fmt.Sprintf("%d of %d cycles missed", missed, r.ExpectedCycles))
	}
	if over := ended.Sub(stopAt); over > lagAllowance {
		why = append(why, fmt.Sprintf("the run went %s past its end", shown(over)))
	}
	if len(why) == 0 {
		return r, ""
	}
	return r, fmt.Sprintf("at %g× real time the control plane fell behind virtual time (%s): queue times and pool states are skewed; "+
		"--speed 0 runs as fast as the simulation settles, with no skew", p.speed, strings.Join(why, ", "))
}

// shown rounds d as a warning gives it: to a tenth of a second under ten
// seconds, to the second above.
func shown(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}
