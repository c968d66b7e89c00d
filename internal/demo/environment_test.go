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

// An environment the file names no pool of, beside pools that name none,
// is served (those pools belong to every environment) but warned about in
// the header, the result and the summary, naming the file's environments:
// a stack deployed with it would leave every job meant for them unanswered.
func TestAnEnvironmentNoPoolNamesIsWarnedAbout(t *testing.T) {
	const want = "no pool names environment production: only pools naming none are served (dependabot); " +
		"the file's environments are dev (pick one with --environment)"
	o := Options{Config: exampleConfig(t), Environment: "production", Duration: 2 * time.Minute, Start: monday,
		Interval: 30 * time.Second, Latency: DefaultLatency}
	var header bytes.Buffer
	Header(&header, o)
	if !strings.Contains(header.String(), "\nwarning: "+want+"\n") {
		t.Errorf("the header does not warn:\n%s", header.String())
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Pools) != 1 || res.Pools[0].Name != "dependabot" || len(res.Warnings) != 1 || res.Warnings[0] != want {
		t.Fatalf("pools %+v, warnings %q", res.Pools, res.Warnings)
	}
	var summary bytes.Buffer
	Summary(&summary, res)
	if !strings.Contains(summary.String(), "\nwarning: "+want+"\n") {
		t.Errorf("the summary does not warn:\n%s", summary.String())
	}

	// The file's own environment (in any case, as pools are matched), and
	// one of a file naming several, is no cause for a warning.
	for _, c := range []struct {
		o   Options
		env string
	}{{Options{Config: exampleConfig(t)}, "dev"}, {Options{Config: exampleConfig(t)}, "DEV"}, {Options{Config: testfixtures.TwoEnvironments(t)}, "prod"}} {
		c.o.Environment, c.o.Duration, c.o.Interval = c.env, time.Minute, 30*time.Second
		var out bytes.Buffer
		Header(&out, c.o)
		if strings.Contains(out.String(), "warning") {
			t.Errorf("environment %s: the header warns:\n%s", c.env, out.String())
		}
	}
}
