package simulate_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/demo"
	"github.com/bullpen-ci/bullpen/internal/history"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

func TestParseTimings(t *testing.T) {
	got, err := simulate.ParseTimings("t.json", []byte(`{"default": {"boot": "20s"}, "families": {"m7a": {"boot": "1m", "warm_up": "45s"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := demo.DefaultLatency
	want.Boot = 20 * time.Second
	if got.Default != want {
		t.Errorf("default %+v, want %+v", got.Default, want)
	}
	m7a := want
	m7a.Boot, m7a.WarmUp = time.Minute, 45*time.Second
	if got.Families["m7a"] != m7a {
		t.Errorf("m7a %+v, want %+v", got.Families["m7a"], m7a)
	}
	for body, says := range map[string]string{
		`{"default": {"bot": "1s"}}`:                  `t.json: default: unknown timing "bot" (known: boot, start, stop, terminate, warm_up)`,
		`{"families": {"m7a": {"boot": "soon"}}}`:     `t.json: families.m7a: boot: "soon" is not a duration`,
		`{"families": {"m7a.large": {"boot": "1s"}}}`: `t.json: families: "m7a.large" is not a family`,
		`{"defaults": {}}`:                            `t.json: json: unknown field "defaults"`,
		`{"default": {"start": "-1s"}}`:               `t.json: default: start: "-1s" is not a duration >= 0`,
	} {
		if _, err := simulate.ParseTimings("t.json", []byte(body)); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want %q", body, err, says)
		}
	}
}

// A family that boots slowly makes cold starts on its instance types wait
// that long; a slow family the runner does not use changes nothing.
func TestFamilyTimingsSlowOnlyThatFamily(t *testing.T) {
	cfg := example(t)
	at := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	var jobs []history.Job
	for i := range 3 {
		id := int64(i + 1)
		created := at.Add(time.Duration(i) * time.Second)
		started, completed := created.Add(time.Second), created.Add(time.Minute)
		jobs = append(jobs, history.Job{ID: id, RunID: 700 + id, Repo: "acme/app", Name: "build",
			Labels: []string{fmt.Sprintf("runs-on=%d/runner=small-x64/env=dev", 700+id)}, Created: created,
			Started: &started, Completed: &completed, Conclusion: "success"})
	}
	slow := demo.DefaultLatency
	slow.Boot = 2 * time.Minute
	cold := func(family string) demo.Latencies {
		rep, err := simulate.Run(context.Background(), simulate.Options{Config: cfg, Jobs: jobs, Seed: 1,
			FamilyLatency: map[string]sim.Latency{family: slow}})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Simulated.QueueTimes["cold"]
	}
	if l := cold("t3"); l.Count != 3 || l.P50 < slow.Boot.Seconds() {
		t.Errorf("small-x64 (t3) cold starts with t3 booting in 2 min: %+v", l)
	}
	if l := cold("m7a"); l.Count != 3 || l.P50 >= slow.Boot.Seconds() {
		t.Errorf("small-x64 (t3) cold starts with only m7a slow: %+v", l)
	}
}
