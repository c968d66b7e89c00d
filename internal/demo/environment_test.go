package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

// The header names the environment served, counts only its pools and
// names the others'; by default it is the first pool's.
func TestHeaderNamesTheEnvironmentServed(t *testing.T) {
	for env, want := range map[string][]string{
		"":     {"environment dev, 2 pools on the simulated cloud", "not served here (pools of other environments): b@prod"},
		"prod": {"environment prod, 2 pools on the simulated cloud", "not served here (pools of other environments): a@dev"},
	} {
		var out bytes.Buffer
		Header(&out, Options{Config: testfixtures.TwoEnvironments(t), Environment: env, Duration: time.Minute, Interval: 30 * time.Second})
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("environment %q: header lacks %q:\n%s", env, w, out.String())
			}
		}
	}
	var out bytes.Buffer
	Header(&out, Options{Config: exampleConfig(t), Duration: time.Minute})
	if !strings.Contains(out.String(), "environment dev, 4 pools") || strings.Contains(out.String(), "not served") {
		t.Errorf("the example's header:\n%s", out.String())
	}
}

// A run of the prod environment serves prod's pools and those of every
// environment, generates jobs for them only, and says so in its result.
func TestDemoServesTheEnvironmentItIsGiven(t *testing.T) {
	res, err := Run(context.Background(), Options{
		Config: testfixtures.TwoEnvironments(t), Environment: "prod", Duration: 6 * time.Minute, Start: monday,
		JobsPerMinute: 4, Seed: 3, Latency: DefaultLatency,
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range res.Pools {
		names = append(names, p.Name)
	}
	if res.Environment != "prod" || strings.Join(names, ",") != "b,shared" {
		t.Errorf("environment %q served pools %v; want prod serving b and shared", res.Environment, names)
	}
	if res.Jobs.Total == 0 || res.Jobs.ByStatus["rejected"] != 0 {
		t.Errorf("jobs %+v: want some, none rejected", res.Jobs.ByStatus)
	}

	// Without the pool of every environment, staging would serve nothing.
	bound := testfixtures.TwoEnvironments(t)
	bound.Pools = bound.Pools[:2]
	_, err = Run(context.Background(), Options{Config: bound, Environment: "staging", Duration: time.Minute})
	if err == nil || !strings.Contains(err.Error(), `no pool of the configuration belongs to environment "staging": its pools' environments are dev, prod`) {
		t.Fatalf("an environment no pool belongs to: %v", err)
	}
}
