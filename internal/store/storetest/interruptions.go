package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func (e *env) interrupt(is ...domain.Interruption) {
	e.t.Helper()
	for _, i := range is {
		if err := e.s.RecordInterruption(e.ctx, i); err != nil {
			e.t.Fatalf("record interruption %s: %v", i.ID, err)
		}
	}
}

// wantInterruptions checks what is listed since since: want, in order,
// times as instants and in UTC.
func (e *env) wantInterruptions(since time.Time, want ...domain.Interruption) {
	e.t.Helper()
	got, err := e.s.ListInterruptions(e.ctx, since)
	if err != nil {
		e.t.Fatalf("list interruptions since %v: %v", since, err)
	}
	show := func(is []domain.Interruption) string {
		var b strings.Builder
		for _, i := range is {
			fmt.Fprintf(&b, "\n  %s %s at %v expires %v", i.ID, i.Runner, i.At, i.Expires)
		}
		return b.String()
	}
	same := len(got) == len(want)
	for k := 0; same && k < len(got); k++ {
		g, w := got[k], want[k]
		same = g.ID == w.ID && g.Runner == w.Runner && g.At.Equal(w.At) && g.Expires.Equal(w.Expires) &&
			g.At.Location() == time.UTC && g.Expires.Location() == time.UTC
	}
	if !same {
		e.t.Fatalf("interruptions since %v at %v:%s\nwant (in UTC):%s", since, e.clk.Now(), show(got), show(want))
	}
}

func interruption(id, runner string, at time.Time) domain.Interruption {
	return domain.Interruption{ID: id, Runner: runner, At: at, Expires: at.Add(time.Hour)}
}

func testInterruptionsSince(t *testing.T, e *env) {
	e.wantInterruptions(time.Time{})
	zone := time.FixedZone("UTC-5", -5*60*60)
	later := interruption("c", "spot-x64", start.Add(2*time.Minute+7*time.Microsecond).In(zone))
	first := interruption("b", "spot-x64", start)
	// Two machines of one class taken back at the same instant are two
	// interruptions, listed by id.
	sameInstant := interruption("a", "spot-arm64", start)
	e.interrupt(later, first, sameInstant)
	later.At, later.Expires = later.At.UTC(), later.Expires.UTC()

	e.wantInterruptions(time.Time{}, sameInstant, first, later)
	e.wantInterruptions(start, sameInstant, first, later)
	e.wantInterruptions(start.Add(time.Microsecond), later)
	e.wantInterruptions(later.At, later)
	e.wantInterruptions(later.At.Add(time.Microsecond))
}

func testInterruptionTwice(t *testing.T, e *env) {
	i := interruption("a", "spot-x64", start)
	e.interrupt(i, i)
	e.wantInterruptions(time.Time{}, i)
}

func testInterruptionsExpire(t *testing.T, e *env) {
	short := domain.Interruption{ID: "short", Runner: "spot-x64", At: start, Expires: start.Add(10 * time.Minute)}
	long := interruption("long", "spot-x64", start.Add(time.Minute))
	e.interrupt(short, long)

	e.clk.AdvanceTo(short.Expires.Add(-time.Microsecond))
	e.wantInterruptions(time.Time{}, short, long)
	// Expired from its expiry on, as a lease is.
	e.clk.AdvanceTo(short.Expires)
	e.wantInterruptions(time.Time{}, long)
	// What a store does with expired rows when it records another is its
	// own business, but it lists them no more.
	next := interruption("next", "spot-x64", e.clk.Now())
	e.interrupt(next)
	e.wantInterruptions(time.Time{}, long, next)
	e.clk.AdvanceTo(next.Expires)
	e.wantInterruptions(time.Time{})
}

func testInterruptionRefused(t *testing.T, e *env) {
	for _, c := range []struct {
		i    domain.Interruption
		want string
	}{
		{domain.Interruption{Runner: "r", At: start, Expires: start.Add(time.Hour)}, "no id"},
		{domain.Interruption{ID: "a", At: start, Expires: start.Add(time.Hour)}, "no runner"},
		{domain.Interruption{ID: "a", Runner: "r", Expires: start.Add(time.Hour)}, "no time"},
		{domain.Interruption{ID: "a", Runner: "r", At: start, Expires: start}, "not after its time"},
		{domain.Interruption{ID: "a", Runner: "r", At: start}, "not after its time"},
	} {
		err := e.s.RecordInterruption(e.ctx, c.i)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("record %+v: got %v, want an error naming %q", c.i, err, c.want)
		}
	}
	e.wantInterruptions(time.Time{})
}

func testInterruptionsAfterClose(t *testing.T, e *env) {
	e.interrupt(interruption("a", "spot-x64", start))
	if err := e.s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := e.s.RecordInterruption(e.ctx, interruption("b", "spot-x64", start)); err == nil {
		t.Error("record interruption on a closed store: no error")
	}
	if _, err := e.s.ListInterruptions(e.ctx, time.Time{}); err == nil {
		t.Error("list interruptions on a closed store: no error")
	}
}
