package autoscale

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func problemLines(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var perr *ParamsError
	if !errors.As(err, &perr) {
		t.Fatalf("error %v is not a *ParamsError", err)
	}
	out := make([]string, len(perr.Problems))
	for i, p := range perr.Problems {
		out[i] = p.String()
	}
	return out
}

func wantProblems(t *testing.T, err error, want ...string) {
	t.Helper()
	got := problemLines(t, err)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestDefaultsValidate(t *testing.T) {
	wantProblems(t, DefaultParams().Validate())
	wantProblems(t, DefaultParams().ValidateFloor(0))
}

// The specification's own table describes an autoscaler that never scales.
func TestSeedDefaultsAreRejected(t *testing.T) {
	wantProblems(t, SeedParams().Validate(),
		"BREACH_THRESHOLD=2.0 is unreachable: with POLL_INTERVAL=60s, DECAY_HALF_LIFE_SECONDS=30 and "+
			"STABILIZATION_WINDOW_MINUTES=3, a sustained breach scores at most 1 + 0.25 + 0.0625 = 1.3125")
}

func TestValidateReportsEveryProblem(t *testing.T) {
	wantProblems(t, Params{}.Validate(),
		"RUNNERS_PER_INSTANCE=0 must be at least 1",
		"MIN_INSTANCES=0 must be at least 1 (DigitalOcean App Platform requires at least one instance)",
		"MAX_INSTANCES=0 must be at least 1 and at least MIN_INSTANCES=0",
		"POLL_INTERVAL=0s must be more than 0 seconds",
		"SCALE_UP_THRESHOLD=0.0 must be more than 0",
		"SCALE_UP_STEP=0 must be at least 1",
		"SCALE_DOWN_STEP=0 must be at least 1",
		"SCALE_UP_PROPORTION=0.0 must be more than 0",
		"SCALE_DOWN_PROPORTION=0.0 must be more than 0",
		"STABILIZATION_WINDOW_MINUTES=0 must be more than 0 minutes",
		"DECAY_HALF_LIFE_SECONDS=0 must be more than 0 seconds",
		"BREACH_THRESHOLD=0.0 must be more than 0",
	)

	p := DefaultParams()
	p.MinInstances, p.MaxInstances = 4, 3
	p.ScaleDownThreshold = 1.5
	p.ScaleUpCooldown, p.ScaleDownCooldown = -time.Second, -2*time.Second
	p.ScaleUpProportion = math.NaN()
	wantProblems(t, p.Validate(),
		"MAX_INSTANCES=3 must be at least 1 and at least MIN_INSTANCES=4",
		"SCALE_DOWN_THRESHOLD=1.5 must be below SCALE_UP_THRESHOLD=1.5, so that a dead zone separates scaling up from scaling down",
		"SCALE_UP_COOLDOWN=-1s must be 0 seconds or more",
		"SCALE_DOWN_COOLDOWN=-2s must be 0 seconds or more",
		"SCALE_UP_PROPORTION=NaN must be more than 0",
	)
}

func TestValidateMinFloor(t *testing.T) {
	p := DefaultParams()
	p.MinInstances = 0
	wantProblems(t, p.Validate(),
		"MIN_INSTANCES=0 must be at least 1 (DigitalOcean App Platform requires at least one instance)")
	wantProblems(t, p.ValidateFloor(0))
	p.MinInstances = -1
	wantProblems(t, p.ValidateFloor(0), "MIN_INSTANCES=-1 must be at least 0")
}

func TestReachability(t *testing.T) {
	cases := []struct {
		name               string
		poll, window, half time.Duration
		threshold          float64
		problem            string // "" when reachable
	}{
		{name: "seed defaults", poll: 60 * time.Second, window: 3 * time.Minute, half: 30 * time.Second, threshold: 2,
			problem: "BREACH_THRESHOLD=2.0 is unreachable: with POLL_INTERVAL=60s, DECAY_HALF_LIFE_SECONDS=30 and STABILIZATION_WINDOW_MINUTES=3, a sustained breach scores at most 1 + 0.25 + 0.0625 = 1.3125"},
		{name: "60 s half-life is still short of 2.0", poll: 60 * time.Second, window: 3 * time.Minute, half: 60 * time.Second, threshold: 2,
			problem: "BREACH_THRESHOLD=2.0 is unreachable: with POLL_INTERVAL=60s, DECAY_HALF_LIFE_SECONDS=60 and STABILIZATION_WINDOW_MINUTES=3, a sustained breach scores at most 1 + 0.5 + 0.25 = 1.75"},
		{name: "120 s half-life reaches 2.0", poll: 60 * time.Second, window: 3 * time.Minute, half: 120 * time.Second, threshold: 2},
		{name: "threshold exactly at the maximum is reachable", poll: 60 * time.Second, window: 2 * time.Minute, half: 60 * time.Second, threshold: 1.5},
		{name: "threshold a little above the maximum", poll: 60 * time.Second, window: 2 * time.Minute, half: 60 * time.Second, threshold: 1.501,
			problem: "BREACH_THRESHOLD=1.501 is unreachable: with POLL_INTERVAL=60s, DECAY_HALF_LIFE_SECONDS=60 and STABILIZATION_WINDOW_MINUTES=2, a sustained breach scores at most 1 + 0.5 = 1.5"},
		{name: "a window of 2.5 polls keeps 3 breaches", poll: 60 * time.Second, window: 150 * time.Second, half: 60 * time.Second, threshold: 1.75},
		{name: "a window of exactly 2 polls keeps 2 breaches", poll: 60 * time.Second, window: 2 * time.Minute, half: 60 * time.Second, threshold: 1.75,
			problem: "BREACH_THRESHOLD=1.75 is unreachable: with POLL_INTERVAL=60s, DECAY_HALF_LIFE_SECONDS=60 and STABILIZATION_WINDOW_MINUTES=2, a sustained breach scores at most 1 + 0.5 = 1.5"},
		{name: "a window no longer than a poll keeps only the latest breach", poll: 60 * time.Second, window: 30 * time.Second, half: 60 * time.Second, threshold: 1.1,
			problem: "BREACH_THRESHOLD=1.1 is unreachable: with POLL_INTERVAL=60s, DECAY_HALF_LIFE_SECONDS=60 and STABILIZATION_WINDOW_MINUTES=0.5, a sustained breach scores at most 1, the latest breach alone, as the window is no longer than one poll"},
		{name: "a long series is elided", poll: 10 * time.Second, window: 3 * time.Minute, half: 30 * time.Second, threshold: 5,
			problem: "BREACH_THRESHOLD=5.0 is unreachable: with POLL_INTERVAL=10s, DECAY_HALF_LIFE_SECONDS=30 and STABILIZATION_WINDOW_MINUTES=3, a sustained breach scores at most 1 + 0.7937 + 0.63 + … + 0.0197 (18 breaches) = 4.7716"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			p.PollInterval, p.StabilizationWindow, p.DecayHalfLife, p.BreachThreshold = tc.poll, tc.window, tc.half, tc.threshold
			if tc.problem == "" {
				wantProblems(t, p.Validate())
			} else {
				wantProblems(t, p.Validate(), tc.problem)
			}
		})
	}
}

// The bound the validation computes is the score Decide actually reaches
// when the breach never stops.
func TestReachabilityMatchesDecide(t *testing.T) {
	cases := []struct{ poll, window, half time.Duration }{
		{60 * time.Second, 3 * time.Minute, 30 * time.Second},
		{60 * time.Second, 3 * time.Minute, 120 * time.Second},
		{60 * time.Second, 150 * time.Second, 60 * time.Second},
		{60 * time.Second, 30 * time.Second, 60 * time.Second},
		{7 * time.Second, 100 * time.Second, 45 * time.Second},
	}
	for _, tc := range cases {
		p := DefaultParams()
		p.PollInterval, p.StabilizationWindow, p.DecayHalfLife = tc.poll, tc.window, tc.half
		k := int64((tc.window - 1) / tc.poll)
		bound := sustainedMax(math.Pow(0.5, float64(tc.poll)/float64(tc.half)), k)
		var st State
		best := 0.0
		for i := range 100 {
			d := Decide(p, &st, testEpoch.Add(time.Duration(i)*tc.poll), 1000, 1)
			best = max(best, d.Score)
		}
		if math.Abs(best-bound) > 1e-9 {
			t.Errorf("poll %v window %v half-life %v: Decide reaches %.12f, validation says %.12f", tc.poll, tc.window, tc.half, best, bound)
		}
	}
}

func TestParamsFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	p, err := ParamsFromEnv(env(nil))
	if err != nil || p != DefaultParams() {
		t.Errorf("empty environment: got %+v, %v; want the defaults", p, err)
	}

	p, err = ParamsFromEnv(env(map[string]string{
		"RUNNERS_PER_INSTANCE": "2", "MIN_INSTANCES": "2", "MAX_INSTANCES": " 10 ", "POLL_INTERVAL": "30",
		"SCALE_UP_THRESHOLD": "1.2", "SCALE_DOWN_THRESHOLD": "0.5", "SCALE_UP_COOLDOWN": "90",
		"SCALE_DOWN_COOLDOWN": "300", "SCALE_UP_STEP": "3", "SCALE_DOWN_STEP": "2", "SCALE_UP_PROPORTION": "1",
		"SCALE_DOWN_PROPORTION": "0.25", "STABILIZATION_WINDOW_MINUTES": "2.5", "DECAY_HALF_LIFE_SECONDS": "45",
		"BREACH_THRESHOLD": "", // empty keeps the default
	}))
	want := Params{
		RunnersPerInstance: 2, MinInstances: 2, MaxInstances: 10, PollInterval: 30 * time.Second,
		ScaleUpThreshold: 1.2, ScaleDownThreshold: 0.5, ScaleUpCooldown: 90 * time.Second,
		ScaleDownCooldown: 300 * time.Second, ScaleUpStep: 3, ScaleDownStep: 2, ScaleUpProportion: 1,
		ScaleDownProportion: 0.25, StabilizationWindow: 150 * time.Second, DecayHalfLife: 45 * time.Second,
		BreachThreshold: 1.5,
	}
	if err != nil || p != want {
		t.Errorf("full environment: got %+v, %v; want %+v", p, err, want)
	}

	_, err = ParamsFromEnv(env(map[string]string{"DECAY_HALF_LIFE_SECONDS": "30", "BREACH_THRESHOLD": "2.0"}))
	wantProblems(t, err, "BREACH_THRESHOLD=2.0 is unreachable: with POLL_INTERVAL=60s, DECAY_HALF_LIFE_SECONDS=30 and "+
		"STABILIZATION_WINDOW_MINUTES=3, a sustained breach scores at most 1 + 0.25 + 0.0625 = 1.3125")
}

// Unreadable variables and invalid ones are reported together, in the
// seed's table order; checks that would judge an unreadable variable's
// default are left out.
func TestParamsFromEnvReportsEveryBadVariable(t *testing.T) {
	m := map[string]string{
		"MIN_INSTANCES": "0", "MAX_INSTANCES": "x", "POLL_INTERVAL": "60s", "SCALE_DOWN_THRESHOLD": "2",
		"SCALE_UP_COOLDOWN": "-5", "SCALE_UP_PROPORTION": "NaN", "SCALE_DOWN_PROPORTION": "inf",
		"STABILIZATION_WINDOW_MINUTES": "1e30", "SCALE_UP_STEP": "1.5", "BREACH_THRESHOLD": "9",
	}
	_, err := ParamsFromEnv(func(k string) string { return m[k] })
	wantProblems(t, err,
		"MIN_INSTANCES=0 must be at least 1 (DigitalOcean App Platform requires at least one instance)",
		`MAX_INSTANCES="x" is not a whole number (want e.g. 5)`,
		`POLL_INTERVAL="60s" is not a number of seconds (want e.g. 60)`,
		"SCALE_DOWN_THRESHOLD=2.0 must be below SCALE_UP_THRESHOLD=1.5, so that a dead zone separates scaling up from scaling down",
		"SCALE_UP_COOLDOWN=-5s must be 0 seconds or more",
		`SCALE_UP_STEP="1.5" is not a whole number (want e.g. 2)`,
		`SCALE_UP_PROPORTION="NaN" is not a number (want e.g. 0.5)`,
		`SCALE_DOWN_PROPORTION="inf" is not a number (want e.g. 0.5)`,
		`STABILIZATION_WINDOW_MINUTES="1e30" is too large (want a number of minutes, e.g. 3)`,
	)
}
