package ec2like

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestRunnerRanges(t *testing.T) {
	for r, want := range map[domain.Range]string{{}: "any", {Min: 2, Max: 2}: "2", {Min: 4}: "4 or more", {Max: 8}: "at most 8", {Min: 2, Max: 4}: "2 to 4"} {
		if got := RangeText(r); got != want {
			t.Errorf("RangeText(%+v) = %q, want %q", r, got, want)
		}
	}
	for _, c := range []struct {
		v    int
		r    domain.Range
		want bool
	}{{3, domain.Range{}, true}, {2, domain.Range{Min: 2, Max: 2}, true}, {1, domain.Range{Min: 2}, false}, {9, domain.Range{Max: 8}, false}} {
		if got := InRange(c.v, c.r); got != c.want {
			t.Errorf("InRange(%d, %+v) = %t", c.v, c.r, got)
		}
	}
	if got := RAMMiB(domain.Range{Min: 1, Max: 4}); got != (domain.Range{Min: 1024, Max: 4096}) {
		t.Errorf("RAMMiB: %+v", got)
	}
}
