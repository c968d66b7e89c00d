package autoscale

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ParamsFromEnv reads the autoscaler's environment variables over DefaultParams;
// a variable that is unset or empty keeps its default. Durations are
// numbers in the unit the specification's table gives: seconds, except
// STABILIZATION_WINDOW_MINUTES. The result is then validated as Validate
// does, and every problem, unreadable and invalid values alike, comes back
// in one *ParamsError together with the parameters as far as they were
// read.
func ParamsFromEnv(getenv func(string) string) (Params, error) {
	p := DefaultParams()
	r := envReader{getenv: getenv, bad: map[string]bool{}}
	r.int(EnvRunnersPerInstance, &p.RunnersPerInstance)
	r.int(EnvMinInstances, &p.MinInstances)
	r.int(EnvMaxInstances, &p.MaxInstances)
	r.duration(EnvPollInterval, time.Second, &p.PollInterval)
	r.float(EnvScaleUpThreshold, &p.ScaleUpThreshold)
	r.float(EnvScaleDownThreshold, &p.ScaleDownThreshold)
	r.duration(EnvScaleUpCooldown, time.Second, &p.ScaleUpCooldown)
	r.duration(EnvScaleDownCooldown, time.Second, &p.ScaleDownCooldown)
	r.int(EnvScaleUpStep, &p.ScaleUpStep)
	r.int(EnvScaleDownStep, &p.ScaleDownStep)
	r.float(EnvScaleUpProportion, &p.ScaleUpProportion)
	r.float(EnvScaleDownProportion, &p.ScaleDownProportion)
	r.duration(EnvStabilizationWindow, time.Minute, &p.StabilizationWindow)
	r.duration(EnvDecayHalfLife, time.Second, &p.DecayHalfLife)
	r.float(EnvBreachThreshold, &p.BreachThreshold)

	probs := append(r.probs, p.problems(1, r.bad)...)
	sort.SliceStable(probs, func(i, j int) bool { return paramOrder[probs[i].Param] < paramOrder[probs[j].Param] })
	if len(probs) > 0 {
		return p, &ParamsError{Problems: probs}
	}
	return p, nil
}

// paramOrder is the specification's table order, in which problems are listed.
var paramOrder = func() map[string]int {
	names := []string{
		EnvRunnersPerInstance, EnvMinInstances, EnvMaxInstances, EnvPollInterval,
		EnvScaleUpThreshold, EnvScaleDownThreshold, EnvScaleUpCooldown, EnvScaleDownCooldown,
		EnvScaleUpStep, EnvScaleDownStep, EnvScaleUpProportion, EnvScaleDownProportion,
		EnvStabilizationWindow, EnvDecayHalfLife, EnvBreachThreshold,
	}
	m := make(map[string]int, len(names))
	for i, n := range names {
		m[n] = i
	}
	return m
}()

// envReader collects a problem for every variable it cannot read and
// remembers which ones, so validation does not judge their defaults.
type envReader struct {
	getenv func(string) string
	probs  []Problem
	bad    map[string]bool
}

func (r *envReader) lookup(name string) (string, bool) {
	v := strings.TrimSpace(r.getenv(name))
	return v, v != ""
}

func (r *envReader) fail(name, raw, reason string) {
	r.bad[name] = true
	r.probs = append(r.probs, Problem{Param: name, Value: strconv.Quote(raw), Reason: reason})
}

func (r *envReader) int(name string, dst *int) {
	raw, ok := r.lookup(name)
	if !ok {
		return
	}
	v, err := strconv.Atoi(raw)
	if err != nil {
		r.fail(name, raw, "is not a whole number (want e.g. "+strconv.Itoa(*dst)+")")
		return
	}
	*dst = v
}

func (r *envReader) float(name string, dst *float64) {
	raw, ok := r.lookup(name)
	if !ok {
		return
	}
	v, err := strconv.ParseFloat(raw, 64)
	if err != nil || !finite(v) {
		r.fail(name, raw, "is not a number (want e.g. "+num(*dst)+")")
		return
	}
	*dst = v
}

// duration reads a plain number of units; "60s" is refused because the
// seed's variables carry their unit in the name or the documentation.
func (r *envReader) duration(name string, unit time.Duration, dst *time.Duration) {
	raw, ok := r.lookup(name)
	if !ok {
		return
	}
	unitName, example := "seconds", seconds(*dst)
	if unit == time.Minute {
		unitName, example = "minutes", minutes(*dst)
	}
	v, err := strconv.ParseFloat(raw, 64)
	if err != nil || !finite(v) {
		r.fail(name, raw, "is not a number of "+unitName+" (want e.g. "+example+")")
		return
	}
	nanos := v * float64(unit)
	if math.Abs(nanos) >= math.MaxInt64 {
		r.fail(name, raw, "is too large (want a number of "+unitName+", e.g. "+example+")")
		return
	}
	*dst = time.Duration(math.Round(nanos))
}
