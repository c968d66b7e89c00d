package autoscale

import (
	"strings"
	"testing"
	"time"
)

// A poll comes at any instant: the cooldown left is said in whole seconds,
// rounded up, never as 29.928252567s or as 0s while it still blocks.
func TestDecideSaysTheCooldownLeftInWholeSeconds(t *testing.T) {
	for _, tc := range []struct {
		since time.Duration
		want  string
	}{
		{30*time.Second + 71747433*time.Nanosecond, "cooldown 30s left"},
		{59*time.Second + 600*time.Millisecond, "cooldown 1s left"},
		{30 * time.Second, "cooldown 30s left"},
	} {
		st := hist{up: []int64{940}, lastUp: never, lastDown: never}.state()
		st.LastUp = at(now).Add(-tc.since)
		d := Decide(DefaultParams(), &st, at(now), 4, 2)
		if d.Action != ActionNone || !strings.HasSuffix(d.Reason, "blocked: "+tc.want) {
			t.Errorf("%s after the last scale-up: %s, %q; want blocked, %q", tc.since, d.Action, d.Reason, tc.want)
		}
	}
}
