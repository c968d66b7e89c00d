package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/autoscale"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// An autoscale block the converger's cycle would poll too seldom is placed
// at its key, or, brought in by a merge, at its pool's; the refusal is
// still the autoscaler's cadence error for errors.As.
func TestCheckCadencePlacesEachBlock(t *testing.T) {
	cfg := mustParse(t, `runners:
  small: {image: u}
pools:
  slow:
    runner: small
    autoscale: &slow
      poll-interval: 100s
  quick:
    runner: small
    autoscale:
      poll-interval: 10s
  plain:
    runner: small
  merged:
    <<: {runner: small, autoscale: *slow}
`)
	err := cfg.CheckCadence(cfg.Pools, 30*time.Second)
	var placed Errors
	var cadence *autoscale.CadenceError
	if !errors.As(err, &placed) || !errors.As(err, &cadence) {
		t.Fatalf("got %T %v, want placed problems that are a cadence error", err, err)
	}
	const never = `: breach-threshold 1.5 is never reached with the converger running every 30s`
	var got []string
	for _, e := range placed {
		got = append(got, e.Error())
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], `test.yml:6:5: pool "slow"`+never) || !strings.HasPrefix(got[1], `test.yml:14:3: pool "merged"`+never) {
		t.Errorf("problems:\n%s", strings.Join(got, "\n"))
	}
	if len(cadence.Problems) != 2 || placed[0].Msg != cadence.Problems[0] || err.Error() != placed.Error() {
		t.Errorf("the cadence error %v does not hold the placed problems %v", cadence, placed)
	}

	if err := cfg.CheckCadence(cfg.Pools, 10*time.Second); err != nil {
		t.Errorf("with a converger cycling every 10s: %v", err)
	}
	quick, _ := cfg.Pool("quick")
	if err := cfg.CheckCadence([]domain.Pool{quick}, 30*time.Second); err != nil {
		t.Errorf("only the pools given are checked: %v", err)
	}
}
