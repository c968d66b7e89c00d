package clock_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
)

// Tasks on a serial clock take turns: each runs until it awaits or
// returns, the next in the order they were started or woken, so the same
// program leaves the same trace every time.
func TestSerialTasksTakeTurnsInAFixedOrder(t *testing.T) {
	var first string
	for run := range 20 {
		v := clock.NewSerial(time.Unix(0, 0))
		ts := clock.TasksOf(v)
		var trace []string
		for _, name := range []string{"a", "b", "c"} {
			ts.Go(func() {
				for step := range 3 {
					trace = append(trace, fmt.Sprintf("%s%d@%d", name, step, v.Now().Unix()))
					clock.Sleep(ts, v, nil, time.Duration(len(name)+step)*time.Second)
				}
			})
		}
		v.AfterFunc(2*time.Second, func() { trace = append(trace, "tick") })
		v.Settle()
		for {
			next, ok := v.Next()
			if !ok {
				break
			}
			v.AdvanceTo(next)
			v.Settle()
		}
		got := strings.Join(trace, " ")
		if run == 0 {
			first = got
			want := "a0@0 b0@0 c0@0 a1@1 b1@1 c1@1 tick a2@3 b2@3 c2@3"
			if got != want {
				t.Fatalf("trace %q; want %q", got, want)
			}
		} else if got != first {
			t.Fatalf("run %d traced %q; the first run %q", run, got, first)
		}
	}
}

// Each never has more than limit tasks under way, and returns when all
// have returned.
func TestEachKeepsToItsLimit(t *testing.T) {
	v := clock.NewSerial(time.Unix(0, 0))
	ts := clock.TasksOf(v)
	var under, most, ran int
	finished := false
	ts.Go(func() {
		clock.Each(ts, 7, 3, func(i int) {
			under++
			most = max(most, under)
			clock.Sleep(ts, v, nil, time.Duration(i%3+1)*time.Second)
			under--
			ran++
		})
		finished = true
	})
	v.Settle()
	for next, ok := v.Next(); ok; next, ok = v.Next() {
		v.AdvanceTo(next)
		v.Settle()
	}
	if !finished || ran != 7 || most != 3 {
		t.Errorf("finished %v, ran %d, at most %d at once; want true, 7 and 3", finished, ran, most)
	}
}

// Await answers with the channel that is closed; a nil one never is.
func TestAwaitNamesTheClosedChannel(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	ts := clock.TasksOf(clock.Real{})
	if k := ts.Await(nil, make(chan struct{}), closed); k != 2 {
		t.Fatalf("await: %d; want 2", k)
	}
	v := clock.NewSerial(time.Unix(0, 0))
	open := make(chan struct{})
	var got []int
	clock.TasksOf(v).Go(func() { got = append(got, v.Await(nil, open)) })
	v.Settle()
	if got != nil {
		t.Fatalf("await returned %v before its channel closed", got)
	}
	close(open)
	v.Settle()
	if !slices.Equal(got, []int{1}) {
		t.Fatalf("await: %v; want [1]", got)
	}
}

// Await belongs to tasks started with Go: outside one, or in a timer's
// callback (which runs on the goroutine that settles the clock), it is a
// mistake named at once rather than a simulation that hangs.
func TestAwaitOutsideATaskIsRefused(t *testing.T) {
	refused := func(name string, fn func()) {
		t.Helper()
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "outside a task") {
				t.Errorf("%s: Await did not panic naming the mistake: %v", name, r)
			}
		}()
		fn()
	}
	v := clock.NewSerial(time.Unix(0, 0))
	refused("no task", func() { v.Await(make(chan struct{})) })
	v.AfterFunc(0, func() { v.Await(make(chan struct{})) })
	refused("a timer's callback", v.Settle)
}
