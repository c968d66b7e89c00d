package ec2like

import (
	"fmt"
	"strconv"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// InRange reports whether v is within r, as a runner's cpu and ram ranges
// are read: a zero bound constrains nothing.
func InRange(v int, r domain.Range) bool {
	return (r.Min == 0 || v >= r.Min) && (r.Max == 0 || v <= r.Max)
}

// RAMMiB is a runner's ram range (GiB) in MiB, the unit EC2 gives an
// instance type's memory in.
func RAMMiB(gib domain.Range) domain.Range {
	return domain.Range{Min: gib.Min * 1024, Max: gib.Max * 1024}
}

// RangeText says a range as a refusal names it: "any", "2", "4 or more",
// "at most 8", "2 to 4".
func RangeText(r domain.Range) string {
	switch {
	case r.Min == 0 && r.Max == 0:
		return "any"
	case r.Min == r.Max:
		return strconv.Itoa(r.Min)
	case r.Max == 0:
		return fmt.Sprintf("%d or more", r.Min)
	case r.Min == 0:
		return fmt.Sprintf("at most %d", r.Max)
	}
	return fmt.Sprintf("%d to %d", r.Min, r.Max)
}
