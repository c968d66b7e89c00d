package clock

import (
	"reflect"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Tasks is how work that waits on a clock runs concurrently. On the wall
// clock a task is a goroutine; on a serial virtual clock (NewSerial) tasks
// take turns, so that a simulation comes out the same every time.
//
// The channels a task awaits signal by being closed, never by a value
// sent: a serial clock looks at them without waiting, and a value taken
// that way would be lost.
type Tasks interface {
	// Go runs fn concurrently with its caller and returns a channel that
	// is closed once fn has returned.
	Go(fn func()) <-chan struct{}
	// Await blocks until one of chs is closed and returns the index of
	// one that is (the first, on a serial clock). A nil channel is never
	// ready.
	Await(chs ...<-chan struct{}) int
}

// TasksOf returns the tasks of clk: its own turns on a serial virtual
// clock, goroutines on any other.
func TasksOf(clk domain.Clock) Tasks {
	if v := serialOf(clk); v != nil {
		return v
	}
	return goroutines{}
}

// serialOf returns clk when it is a serial virtual clock, else nil.
func serialOf(clk domain.Clock) *Virtual {
	if v, ok := clk.(*Virtual); ok && v.serial != nil {
		return v
	}
	return nil
}

type goroutines struct{}

func (goroutines) Go(fn func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	return done
}

func (goroutines) Await(chs ...<-chan struct{}) int {
	if len(chs) == 1 && chs[0] != nil {
		<-chs[0]
		return 0
	}
	cases := make([]reflect.SelectCase, len(chs))
	for i, ch := range chs {
		cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv}
		if ch != nil {
			cases[i].Chan = reflect.ValueOf(ch)
		}
	}
	chosen, _, _ := reflect.Select(cases)
	return chosen
}

// Closes returns a channel closed once d has passed on clk, for Await,
// and a function that removes the timer, so that no waiter leaves timers
// behind.
func Closes(clk domain.Clock, d time.Duration) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	t := clk.AfterFunc(d, func() { close(ch) })
	return ch, func() { t.Stop() }
}

// Sleep waits d on clk, or until quit is closed, and leaves no timer
// behind; it reports whether the whole of d passed.
func Sleep(ts Tasks, clk domain.Clock, quit <-chan struct{}, d time.Duration) bool {
	ch, stop := Closes(clk, d)
	defer stop()
	return ts.Await(ch, quit) == 0
}

// Each runs fn(0) … fn(n-1) as tasks, at most limit at a time, and
// returns once all have returned.
func Each(ts Tasks, n, limit int, fn func(i int)) {
	limit = max(limit, 1)
	var running []<-chan struct{}
	for i := range n {
		if len(running) == limit {
			k := ts.Await(running...)
			running = slices.Delete(running, k, k+1)
		}
		running = append(running, ts.Go(func() { fn(i) }))
	}
	for _, done := range running {
		ts.Await(done)
	}
}

// Fan runs fn(0) … fn(n-1), at most limit at a time, for work that does
// not wait on clk: in goroutines, or on a serial clock one after the
// other, in order, as no time passes while they run.
func Fan(clk domain.Clock, n, limit int, fn func(i int)) {
	if serialOf(clk) != nil {
		for i := range n {
			fn(i)
		}
		return
	}
	Each(goroutines{}, n, limit, fn)
}

// turns are the tasks of a serial virtual clock: its AfterFunc callbacks
// and what Go starts. One runs at a time, until it returns or awaits; the
// next is the first of the queue, in the order the tasks were started, the
// timers fell due, or the channels a task awaited were found closed.
type turns struct {
	queue   []*task
	waiting []*task // awaiting, in the order they began to
	current *task   // the one running
	yield   chan struct{}
}

type task struct {
	fn      func()
	done    chan struct{} // closed when fn returns; nil for a timer's callback
	wake    chan struct{}
	started bool
	awaits  []<-chan struct{}
	chosen  int
}

// NewSerial returns a virtual clock whose AfterFunc callbacks and tasks
// (TasksOf) run one at a time, in an order fixed by what happened before:
// Settle runs them until none is left to run. A simulation driven by such
// a clock gives the same result each time it is run, however its tasks
// interleave their waits.
//
// Await must be called from a task started with Go, not from a timer's
// callback, which runs on the goroutine that settles the clock; a task
// must not hold a lock across it, nor block on anything but Await for
// long, since no other task runs meanwhile.
func NewSerial(start time.Time) *Virtual {
	v := NewVirtual(start)
	v.serial = &turns{yield: make(chan struct{})}
	return v
}

// Go queues fn as a task of a serial clock: it runs when its turn comes.
// Other clocks run tasks as goroutines (TasksOf).
func (v *Virtual) Go(fn func()) <-chan struct{} {
	if v.serial == nil {
		panic("clock: Go on a virtual clock that is not serial (use TasksOf)")
	}
	t := &task{fn: fn, done: make(chan struct{}), wake: make(chan struct{})}
	v.mu.Lock()
	v.serial.queue = append(v.serial.queue, t)
	v.mu.Unlock()
	return t.done
}

// Await gives the turn away until one of chs is closed.
func (v *Virtual) Await(chs ...<-chan struct{}) int {
	if v.serial == nil {
		panic("clock: Await on a virtual clock that is not serial (use TasksOf)")
	}
	if k := closedOne(chs); k >= 0 {
		return k
	}
	v.mu.Lock()
	t := v.serial.current
	if t == nil || t.done == nil {
		v.mu.Unlock()
		panic("clock: Await on a serial clock outside a task (a timer's callback is not one: start a task with Go)")
	}
	t.awaits = chs
	v.serial.waiting = append(v.serial.waiting, t)
	v.mu.Unlock()
	v.serial.yield <- struct{}{}
	<-t.wake
	return t.chosen
}

// closedOne returns the index of the first closed channel of chs, or -1.
func closedOne(chs []<-chan struct{}) int {
	for k, ch := range chs {
		if ch == nil {
			continue
		}
		select {
		case <-ch:
			return k
		default:
		}
	}
	return -1
}

// queueCallback makes a fired AfterFunc callback a task; v.mu is held.
func (v *Virtual) queueCallback(f func()) {
	v.serial.queue = append(v.serial.queue, &task{fn: f})
}

// runTurns runs tasks until none is left to run: the queue is empty and
// no awaiting task has a closed channel.
func (v *Virtual) runTurns() {
	s := v.serial
	for {
		v.mu.Lock()
		if len(s.queue) == 0 {
			s.wakeReadyLocked()
		}
		if len(s.queue) == 0 {
			v.mu.Unlock()
			return
		}
		t := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.current = t
		v.mu.Unlock()
		switch {
		case t.started:
			t.wake <- struct{}{}
			<-s.yield
		case t.done == nil:
			// A timer's callback runs here, without a goroutine of its
			// own: nearly every turn is one, and none may await.
			t.fn()
		default:
			t.started = true
			go v.runTask(t)
			<-s.yield
		}
		v.mu.Lock()
		s.current = nil
		v.mu.Unlock()
	}
}

func (v *Virtual) runTask(t *task) {
	defer func() {
		close(t.done)
		v.serial.yield <- struct{}{}
	}()
	t.fn()
}

// wakeReadyLocked queues each awaiting task one of whose channels is
// closed, in the order they began to wait.
func (s *turns) wakeReadyLocked() {
	kept := s.waiting[:0]
	for _, t := range s.waiting {
		if k := closedOne(t.awaits); k >= 0 {
			t.chosen, t.awaits = k, nil
			s.queue = append(s.queue, t)
			continue
		}
		kept = append(kept, t)
	}
	clear(s.waiting[len(kept):])
	s.waiting = kept
}
