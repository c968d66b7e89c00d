package simulate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/config"
	"github.com/bullpen-ci/bullpen/internal/history"
	"github.com/bullpen-ci/bullpen/internal/simulate"
)

// The shipped table prices every type the example configuration launches.
func TestShippedPricesCoverTheExample(t *testing.T) {
	p := simulate.DefaultPrices()
	if p.Region == "" || p.Date == "" {
		t.Fatalf("the table does not say where and when its prices are from: %+v", p)
	}
	if err := p.Covers(example(t)); err != nil {
		t.Fatal(err)
	}
}

// A table without a type the configuration launches is refused, the type
// named; a table with a bad price is refused, the price named.
func TestPricesMissingATypeAreRefused(t *testing.T) {
	p, err := simulate.ParsePrices("mine.json", []byte(`{"region":"eu-west-1","date":"2026-11","on_demand":{"t3.large":0.09},"spot_fraction":{},"volume_gb_month":0.088}`))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	_, err = simulate.Run(context.Background(), simulate.Options{Config: example(t), Prices: &p,
		Jobs: []history.Job{{ID: 1, Repo: "acme/app", Labels: []string{"x"}, Created: at}}})
	// The example's runners launch the types that fit their cpu and ram:
	// small-x64 (ram 1, family t3) a t3.micro, not a t3.large.
	if err == nil || !strings.Contains(err.Error(), "no price for c7a.large (on-demand, runner medium-x64), t3.micro (on-demand, runner small-x64)") {
		t.Fatalf("a table with t3.large only: %v", err)
	}
	for body, want := range map[string]string{
		`{"on_demand":{}}`:                                      "no on_demand prices",
		`{"on_demand":{"t3.large":-1}}`:                         "on_demand t3.large: -1 is not a positive price",
		`{"on_demand":{"t3.large":1},"spot_fraction":{"t3":2}}`: "spot_fraction t3: 2 is not in (0, 1]",
		`{"on_demand":{"t3.large":1},"cheap":true}`:             `unknown field "cheap"`,
	} {
		if _, err := simulate.ParsePrices("mine.json", []byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// A runner no instance type fits is refused before the replay, named with
// what it asks for.
func TestARunnerNoTypeFitsIsRefused(t *testing.T) {
	cfg, err := config.Parse("tiny.yml", []byte("runners:\n  tiny:\n    image: ubuntu24-full-x64\n    ram: 1\n    family: [m7a]\n"+
		"pools:\n  tiny:\n    runner: tiny\n    schedule:\n      - name: default\n        hot: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = simulate.DefaultPrices().Covers(cfg)
	if err == nil || !strings.Contains(err.Error(), "runner tiny: ") || !strings.Contains(err.Error(), "no instance type of families m7a with any vCPUs and 1 GiB") {
		t.Fatalf("Covers: %v", err)
	}
}
