package autoscale

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// poolParams are bullpen's defaults as a pool block starts from them.
func poolParams() Params {
	p := DefaultParams()
	p.MinInstances = 0
	return p
}

// cyclesToScale converges a pool with params under sustained demand (6
// jobs on one hot instance), a cycle every cycle, and returns how many
// cycles pass before its hot target first rises; -1 if it never does in
// an hour.
func cyclesToScale(params Params, cycle time.Duration) int {
	demand := 6
	s := scalerOf(&demand)
	p := poolWith(SpecOf(params))
	for i := 0; time.Duration(i)*cycle < time.Hour; i++ {
		if _, got := s.Adjust(context.Background(), p, morning.Add(time.Duration(i)*cycle), "default", domain.Target{Hot: 1}); got.Hot > 1 {
			return i
		}
	}
	return -1
}

func cadenceProblems(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var cerr *CadenceError
	if !errors.As(err, &cerr) {
		t.Fatalf("error %v is not a *CadenceError", err)
	}
	return cerr.Problems
}

// A block that validates on its own may never scale under serve: a pool
// polls only on converger cycles, so a poll-interval of 100 s with cycles
// every 30 s polls every fourth cycle, 120 s apart and more once cycles
// take any time, where two breaches score 1.5 at best. The check refuses
// it, naming the pool, the interval its polls really come at and the fix.
func TestCheckCadenceRefusesABlockThatPollsTooRarelyToScale(t *testing.T) {
	p := poolParams()
	p.PollInterval = 100 * time.Second
	if err := p.ValidateFloor(0); err != nil {
		t.Fatalf("the block alone: %v", err)
	}
	if n := cyclesToScale(p, 30200*time.Millisecond); n != -1 {
		t.Fatalf("scaled after %d cycles of 30.2 s; this case is meant to show a block that never scales", n)
	}
	pools := []domain.Pool{{Name: "plain"}, {Name: "burst-x64", Autoscale: new(SpecOf(p))}, {Name: "fine", Autoscale: new(SpecOf(poolParams()))}}
	got := cadenceProblems(t, CheckCadence(pools, 30*time.Second))
	want := `pool "burst-x64": breach-threshold 1.5 is never reached with the converger running every 30s: ` +
		`poll-interval 100s polls on every 4th cycle, up to 132s apart when each cycle's work takes 10% of its interval, ` +
		`where a sustained breach scores at most 1 + 0.4665 = 1.4665; ` +
		`set poll-interval to 90s or less, a multiple of the converger's interval, or lower breach-threshold to 1.46`
	if len(got) != 1 || got[0] != want {
		t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), want)
	}
	// The fix it names works, on cycles that take their whole allowance.
	p.PollInterval = 90 * time.Second
	if err := CheckCadence([]domain.Pool{{Name: "burst-x64", Autoscale: new(SpecOf(p))}}, 30*time.Second); err != nil {
		t.Fatalf("the suggested poll-interval: %v", err)
	}
	if n := cyclesToScale(p, 33*time.Second); n == -1 {
		t.Fatal("the suggested poll-interval never scales on 33 s cycles")
	}
}

// Bullpen's defaults poll every 60 s; a converger cycling every 2 minutes
// polls them every 120 s and more, where they never scale.
func TestCheckCadenceRefusesTheDefaultsOnASlowConverger(t *testing.T) {
	p := poolParams()
	if n := cyclesToScale(p, 120500*time.Millisecond); n != -1 {
		t.Fatalf("scaled after %d cycles of 120.5 s; this case is meant to show a block that never scales", n)
	}
	got := cadenceProblems(t, CheckCadence([]domain.Pool{{Name: "p", Autoscale: new(SpecOf(p))}}, 2*time.Minute))
	want := `pool "p": breach-threshold 1.5 is never reached with the converger running every 120s: ` +
		`poll-interval 60s polls on every cycle, up to 132s apart when each cycle's work takes 10% of its interval, ` +
		`where a sustained breach scores at most 1 + 0.4665 = 1.4665; ` +
		`run the converger more often (--converge-every) or lower breach-threshold to 1.46`
	if len(got) != 1 || got[0] != want {
		t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), want)
	}
	p.BreachThreshold = 1.46
	if err := CheckCadence([]domain.Pool{{Name: "p", Autoscale: new(SpecOf(p))}}, 2*time.Minute); err != nil {
		t.Fatalf("the suggested threshold: %v", err)
	}
	if n := cyclesToScale(p, 132*time.Second); n == -1 {
		t.Fatal("the suggested threshold never scales on 132 s cycles")
	}
}

// What the check accepts scales however long cycles take within their
// allowance; what it refuses never scales for some cycle length within it.
func TestCheckCadenceMatchesThePoolScaler(t *testing.T) {
	cases := []struct {
		poll, every time.Duration
	}{
		{60 * time.Second, 30 * time.Second}, // serve's defaults
		{60 * time.Second, 60 * time.Second},
		{60 * time.Second, 500 * time.Millisecond},
		{100 * time.Second, 30 * time.Second},
		{90 * time.Second, 30 * time.Second},
		{60 * time.Second, 2 * time.Minute},
		{30 * time.Second, 45 * time.Second},
		{61 * time.Second, 60 * time.Second},
		{45 * time.Second, 20 * time.Second},
	}
	for _, c := range cases {
		p := poolParams()
		p.PollInterval = c.poll
		err := CheckCadence([]domain.Pool{{Name: "p", Autoscale: new(SpecOf(p))}}, c.every)
		var never []time.Duration // cycle lengths on which the pool never scales
		for _, permille := range []time.Duration{1, 5, 10, 20, 50, 10 * StepAllowancePercent} {
			cycle := c.every + c.every*permille/1000
			if cyclesToScale(p, cycle) == -1 {
				never = append(never, cycle)
			}
		}
		if err == nil && len(never) > 0 {
			t.Errorf("poll %v, converger every %v: accepted, yet never scales on cycles of %v", c.poll, c.every, never)
		}
		if err != nil && len(never) == 0 {
			t.Errorf("poll %v, converger every %v: refused (%v), yet scales on cycles of every length tried", c.poll, c.every, err)
		}
	}
	if err := CheckCadence([]domain.Pool{{Name: "p", Autoscale: new(SpecOf(poolParams()))}}, 30*time.Second); err != nil {
		t.Fatalf("bullpen's defaults under serve's default cadence: %v", err)
	}
}

// The standalone autoscaler waits POLL_INTERVAL after each poll's API
// calls: at POLL_INTERVAL=120 bullpen's defaults score exactly 1.5 with
// polls exactly 120 s apart, which Validate accepts, and never scale on
// polls any later.
func TestLateProblemRefusesAThresholdOnlyExactPollsReach(t *testing.T) {
	p := DefaultParams()
	p.PollInterval = 120 * time.Second
	if err := p.Validate(); err != nil {
		t.Fatalf("polls exactly 120 s apart: %v", err)
	}
	for _, gap := range []time.Duration{120*time.Second + time.Millisecond, 121 * time.Second} {
		var st State
		for i := range 30 {
			if d := Decide(p, &st, testEpoch.Add(time.Duration(i)*gap), 1000, 1); d.Action != ActionNone {
				t.Fatalf("scaled on polls %v apart; this case is meant to show a threshold late polls never reach", gap)
			}
		}
	}
	pr, ok := p.LateProblem()
	want := "BREACH_THRESHOLD=1.5 is never reached once polls run late: the autoscaler waits POLL_INTERVAL=120s after each poll's API calls, " +
		"so polls come up to 132s apart when those calls take 10% of it, where a sustained breach scores at most 1 + 0.4665 = 1.4665; " +
		"lower BREACH_THRESHOLD to 1.46, or POLL_INTERVAL to 109"
	if ok || pr.String() != want {
		t.Fatalf("got %v %q\nwant %q", ok, pr.String(), want)
	}
	p.PollInterval = 109 * time.Second
	if _, ok := p.LateProblem(); !ok {
		t.Fatal("the suggested POLL_INTERVAL is refused")
	}
	if _, ok := DefaultParams().LateProblem(); !ok {
		t.Fatal("bullpen's defaults are refused")
	}
}

// README's claim about the defaults' reach.
func TestCheckCadenceDefaultsLimit(t *testing.T) {
	pools := []domain.Pool{{Name: "p", Autoscale: new(SpecOf(poolParams()))}}
	if err := CheckCadence(pools, 109*time.Second); err != nil {
		t.Fatalf("--converge-every 109s: %v", err)
	}
	if err := CheckCadence(pools, 110*time.Second); err == nil {
		t.Fatal("--converge-every 110s accepted")
	}
}
