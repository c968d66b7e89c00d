package domain

import (
	"testing"
	"time"
)

func TestListPositionPassed(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	p := &ListPosition[int64]{CreatedAt: t0, ID: 10}
	cases := []struct {
		name    string
		p       *ListPosition[int64]
		created time.Time
		id      int64
		newest  bool
		want    bool
	}{
		{"oldest: a later id of the same time", p, t0, 11, false, true},
		{"oldest: a smaller id created later", p, t0.Add(time.Nanosecond), 9, false, true},
		{"oldest: the position's own row", p, t0, 10, false, false},
		{"oldest: an earlier id of the same time", p, t0, 9, false, false},
		{"newest: an earlier id of the same time", p, t0, 9, true, true},
		{"newest: a larger id created earlier", p, t0.Add(-time.Nanosecond), 11, true, true},
		{"newest: the position's own row", p, t0, 10, true, false},
		{"newest: a row created later", p, t0.Add(time.Second), 1, true, false},
		{"no position", nil, t0, 10, false, true},
	}
	for _, c := range cases {
		if got := c.p.Passed(c.created, c.id, c.newest); got != c.want {
			t.Errorf("%s: Passed = %v, want %v", c.name, got, c.want)
		}
	}
}
