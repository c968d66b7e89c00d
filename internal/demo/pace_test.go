package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// cycles feeds p n cycles an interval and lateBy apart from the start,
// each lasting took.
func cycles(p *pace, n int, lateBy, took time.Duration) time.Time {
	at := p.start
	for range n {
		p.cycle(at, at.Add(took))
		at = at.Add(p.interval + lateBy)
	}
	return at
}

// Loops that keep up with the clock, a pause or two aside, give no
// warning; loops that fall behind it, cycles late, cycles missed or a run
// past its end, give one naming each and suggesting --speed 0.
func TestPaceWarnsWhenTheLoopsFallBehindTheClock(t *testing.T) {
	end := monday.Add(10 * time.Minute)
	for _, tc := range []struct {
		name         string
		feed         func(p *pace) time.Time // returns when the loops had stopped
		want         Pace
		warns, lacks []string
	}{
		{name: "kept up", feed: func(p *pace) time.Time {
			cycles(p, 18, 50*time.Millisecond, 100*time.Millisecond)
			p.cycle(monday.Add(9*time.Minute), monday.Add(9*time.Minute+3*time.Second)) // a pause
			p.cycle(monday.Add(9*time.Minute+30*time.Second), monday.Add(9*time.Minute+30*time.Second))
			p.stop(end)
			return end.Add(200 * time.Millisecond)
		}, want: Pace{Speed: 60, MaxLagSeconds: 3, LateCycles: 1, Cycles: 20, ExpectedCycles: 20, OvershootSeconds: 0.2}},
		{name: "a quarter late", feed: func(p *pace) time.Time {
			for i := range 20 {
				at, took := monday.Add(time.Duration(i)*30*time.Second), 100*time.Millisecond
				if i%4 == 0 {
					took = 2 * time.Second
				}
				p.cycle(at, at.Add(took))
			}
			p.stop(end)
			return end
		}, want: Pace{Speed: 60, MaxLagSeconds: 2, LateCycles: 5, Cycles: 20, ExpectedCycles: 20},
			warns: []string{"at 60× real time the control plane fell behind virtual time (5 of 20 cycles up to 2s late)", "--speed 0"},
			lacks: []string{"missed", "past its end"}},
		{name: "far behind", feed: func(p *pace) time.Time {
			cycles(p, 12, 20*time.Second, 40*time.Second) // every 50 s, each 40 s long
			p.stop(end.Add(25 * time.Second))             // the end timer fired late
			return end.Add(45 * time.Second)
		}, want: Pace{Speed: 60, MaxLagSeconds: 40, LateCycles: 12, Cycles: 12, ExpectedCycles: 20, OvershootSeconds: 45},
			warns: []string{"12 of 12 cycles up to 40s late, 8 of 20 cycles missed, the run went 45s past its end"}},
		{name: "stopped early, then late", feed: func(p *pace) time.Time {
			cycles(p, 4, 0, 0)
			p.stop(monday.Add(2 * time.Minute))
			return monday.Add(2*time.Minute + 5*time.Second)
		}, want: Pace{Speed: 60, Cycles: 4, ExpectedCycles: 4, OvershootSeconds: 5},
			warns: []string{"(the run went 5s past its end)"}},
	} {
		p := newPace(60, monday, end, 30*time.Second)
		got, warning := p.report(tc.feed(p))
		if *got != tc.want {
			t.Errorf("%s: pace %+v, want %+v", tc.name, *got, tc.want)
		}
		if (warning != "") != (len(tc.warns) > 0) {
			t.Errorf("%s: warning %q", tc.name, warning)
		}
		for _, w := range tc.warns {
			if !strings.Contains(warning, w) {
				t.Errorf("%s: warning %q lacks %q", tc.name, warning, w)
			}
		}
		for _, l := range tc.lacks {
			if strings.Contains(warning, l) {
				t.Errorf("%s: warning %q says %q", tc.name, warning, l)
			}
		}
	}
}

// A run on a clock far faster than its loops can follow (ten minutes of
// virtual time pass while the world is set up) says so in its result and
// in its summary; a run at --speed 0 has no pace to report.
func TestARunFasterThanItsLoopsSaysSo(t *testing.T) {
	res, err := Run(context.Background(), Options{
		Config: exampleConfig(t), Duration: 10 * time.Minute, Start: monday, Speed: 1e9, Latency: DefaultLatency,
		StorePath: t.TempDir() + "/demo.db",
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Pace == nil || res.Pace.ExpectedCycles != 20 || res.Pace.Cycles >= 20 || len(res.Warnings) != 1 ||
		!strings.Contains(res.Warnings[0], "cycles missed") {
		t.Fatalf("pace %+v, warnings %q: want missed cycles warned about", res.Pace, res.Warnings)
	}
	var out bytes.Buffer
	Summary(&out, res)
	if !strings.Contains(out.String(), "\nwarning: at 1e+09× real time the control plane fell behind virtual time (") ||
		!strings.Contains(out.String(), "--speed 0 runs as fast as the simulation settles, with no skew\n") {
		t.Errorf("the summary does not warn:\n%s", out.String())
	}

	res, err = Run(context.Background(), Options{Config: exampleConfig(t), Duration: 2 * time.Minute, Start: monday, Latency: DefaultLatency})
	if err != nil {
		t.Fatal(err)
	}
	if res.Pace != nil || len(res.Warnings) != 0 {
		t.Errorf("a stepped run: pace %+v, warnings %q", res.Pace, res.Warnings)
	}
}
