package config

import (
	"strings"
	"testing"
	"time"
)

// autoscaleBase is a file whose pool "p" has an autoscale block that
// continues on line 8 at column 7, where tests add its keys.
const autoscaleBase = `runners:
  r:
    image: x
pools:
  p:
    runner: r
    autoscale:
`

func TestAutoscaleBlock(t *testing.T) {
	cfg, err := Parse("a.yml", []byte(autoscaleBase+`      max: 6
      poll-interval: 30s
      breach-threshold: 1.2
`))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Pools[0].Autoscale
	if a == nil || a.Max != 6 || a.Min != 0 || a.RunnersPerInstance != 1 || a.PollInterval != 30*time.Second ||
		a.BreachThreshold != 1.2 || a.DecayHalfLife != 120*time.Second {
		t.Fatalf("block %+v", a)
	}
	if cfg.Pools[0].Autoscale == nil || !strings.Contains(Summary(cfg.Pools[0]), "hot follows demand up to 6") {
		t.Fatalf("summary %q", Summary(cfg.Pools[0]))
	}
}

func TestAutoscaleBlockErrors(t *testing.T) {
	_, err := Parse("a.yml", []byte(autoscaleBase+`      max: -2
      decay-half-life: 30s
      breach-threshold: 2.0
      poll-interval: 60s
      scale-up-threshold: many
      speed: 3
`))
	if err == nil {
		t.Fatal("a bad block must be refused")
	}
	msg := err.Error()
	for _, want := range []string{
		`a.yml:12:27: pools.p.autoscale.scale-up-threshold: expected a number`,
		`a.yml:13:7: pools.p.autoscale: unknown key "speed" in autoscale block`,
		`pools.p.autoscale: max=-2`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors lack %q:\n%s", want, msg)
		}
	}
}

func TestAutoscaleMaxIsBounded(t *testing.T) {
	_, err := Parse("a.yml", []byte(autoscaleBase+`      max: 1000000000
`))
	if err == nil || !strings.Contains(err.Error(), "pools.p.autoscale: max must be at most 10000, got 1000000000") {
		t.Fatalf("got %v", err)
	}
}

func TestAutoscaleUnreachableThresholdIsRefusedWithTheArithmetic(t *testing.T) {
	_, err := Parse("a.yml", []byte(autoscaleBase+`      max: 3
      decay-half-life: 30s
      breach-threshold: 2.0
      poll-interval: 60s
`))
	want := "breach-threshold=2.0 is unreachable: with poll-interval=60s, decay-half-life=30s and stabilization-window=3m, a sustained breach scores at most 1 + 0.25 + 0.0625 = 1.3125"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}
