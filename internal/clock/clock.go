// Package clock provides the clocks bullpen's loops run on: the wall clock,
// a virtual clock that tests advance by hand, and a scaled clock that runs
// the demo faster than real time.
package clock

import (
	"container/heap"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Real is the wall clock.
type Real struct{}

var _ domain.Clock = Real{}

func (Real) Now() time.Time                         { return time.Now() }
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (Real) AfterFunc(d time.Duration, f func()) domain.Timer {
	return time.AfterFunc(d, f)
}

// Scaled runs Speed times faster than the wall clock, starting at Start.
type Scaled struct {
	start time.Time
	base  time.Time
	speed float64
}

var _ domain.Clock = (*Scaled)(nil)

// NewScaled returns a clock that reads start now and advances speed virtual
// seconds per real second.
func NewScaled(start time.Time, speed float64) *Scaled {
	if speed <= 0 {
		speed = 1
	}
	return &Scaled{start: start, base: time.Now(), speed: speed}
}

func (s *Scaled) Now() time.Time {
	return s.start.Add(time.Duration(float64(time.Since(s.base)) * s.speed))
}

func (s *Scaled) real(d time.Duration) time.Duration { return time.Duration(float64(d) / s.speed) }

func (s *Scaled) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	time.AfterFunc(s.real(d), func() { ch <- s.Now() })
	return ch
}

func (s *Scaled) AfterFunc(d time.Duration, f func()) domain.Timer {
	return time.AfterFunc(s.real(d), f)
}

// Virtual is a clock that moves only when told to. Timers fire, in order of
// their due time, as Advance passes them; AfterFunc callbacks run in their
// own goroutines as with the time package.
type Virtual struct {
	mu      sync.Mutex
	changed *sync.Cond
	now     time.Time
	timers  timerHeap
	seq     uint64
	running int // AfterFunc callbacks fired and not yet returned
	serial  *turns
}

var _ domain.Clock = (*Virtual)(nil)

// NewVirtual returns a virtual clock reading start.
func NewVirtual(start time.Time) *Virtual {
	v := &Virtual{now: start}
	v.changed = sync.NewCond(&v.mu)
	return v
}

func (v *Virtual) Now() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

func (v *Virtual) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	v.schedule(d, func(t time.Time) { ch <- t })
	return ch
}

func (v *Virtual) AfterFunc(d time.Duration, f func()) domain.Timer {
	return v.schedule(d, func(time.Time) {
		// under v.mu: fire is called with it held
		if v.serial != nil {
			v.queueCallback(f)
			return
		}
		v.running++
		go func() {
			defer v.callbackDone()
			f()
		}()
	})
}

func (v *Virtual) callbackDone() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.running--
	v.changed.Broadcast()
}

// Settle waits until every AfterFunc callback that has fired has returned,
// including callbacks those callbacks fired: the way a simulation knows the
// effects of the time it just let pass are complete. On a serial clock it
// runs them, and the tasks, until none is left to run.
func (v *Virtual) Settle() {
	if v.serial != nil {
		v.runTurns()
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for v.running > 0 {
		v.changed.Wait()
	}
}

func (v *Virtual) schedule(d time.Duration, fire func(time.Time)) *virtualTimer {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seq++
	t := &virtualTimer{clock: v, when: v.now.Add(d), seq: v.seq, fire: fire}
	if d <= 0 {
		fire(v.now)
		t.index = -1
		return t
	}
	heap.Push(&v.timers, t)
	v.changed.Broadcast()
	return t
}

// Advance moves the clock forward by d, firing every timer that falls due.
func (v *Virtual) Advance(d time.Duration) {
	v.mu.Lock()
	target := v.now.Add(d)
	v.mu.Unlock()
	v.AdvanceTo(target)
}

// AdvanceTo moves the clock to t (never backwards), firing due timers.
func (v *Virtual) AdvanceTo(t time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for len(v.timers) > 0 && !v.timers[0].when.After(t) {
		next := heap.Pop(&v.timers).(*virtualTimer)
		if next.when.After(v.now) {
			v.now = next.when
		}
		next.fire(v.now)
	}
	if t.After(v.now) {
		v.now = t
	}
	v.changed.Broadcast()
}

// Pass lets d go by timer by timer: each timer fires at its own instant,
// and its effects settle (see Settle) before the next one fires, so that
// chains of callbacks happen at their exact instants.
func (v *Virtual) Pass(d time.Duration) {
	end := v.Now().Add(d)
	for {
		v.Settle()
		next, ok := v.Next()
		if !ok || next.After(end) {
			break
		}
		v.AdvanceTo(next)
	}
	v.AdvanceTo(end)
	v.Settle()
}

// Next reports when the earliest pending timer is due.
func (v *Virtual) Next() (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.timers) == 0 {
		return time.Time{}, false
	}
	return v.timers[0].when, true
}

// Pending returns the number of timers waiting to fire.
func (v *Virtual) Pending() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.timers)
}

// BlockUntil waits until at least n timers are pending: the way a test knows
// that the loops it drives are parked waiting for time to pass.
func (v *Virtual) BlockUntil(n int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for len(v.timers) < n {
		v.changed.Wait()
	}
}

type virtualTimer struct {
	clock *Virtual
	when  time.Time
	seq   uint64
	fire  func(time.Time)
	index int
}

func (t *virtualTimer) Stop() bool {
	v := t.clock
	v.mu.Lock()
	defer v.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&v.timers, t.index)
	t.index = -1
	v.changed.Broadcast()
	return true
}

type timerHeap []*virtualTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].when.Equal(h[j].when) {
		return h[i].seq < h[j].seq
	}
	return h[i].when.Before(h[j].when)
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*virtualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
