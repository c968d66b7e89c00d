package simulate_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
	if err == nil || !strings.Contains(err.Error(), "no price for m7a.large (on-demand, runner medium-x64)") {
		t.Fatalf("a table without m7a.large: %v", err)
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
