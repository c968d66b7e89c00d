package spelling

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"BULLPEN_ENVIROMENT", "BULLPEN_ENVIRONMENT", 1}, {"same", "same", 0}, {"ab", "ba", 2},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"HEARTBEAT_INTERVAL", "RUNNER_COMMAND", "STATE_DIR"}
	for _, c := range []struct {
		name   string
		within int
		want   string
	}{
		{"RUNER_COMMAND", 3, "RUNNER_COMMAND"},
		{"HEARTBEAT_INTERVAL", 3, "HEARTBEAT_INTERVAL"},
		{"SOMETHING_ELSE", 3, ""},
		{"STATE_DIRS", 0, ""},
		{"ab", 1, ""},
	} {
		if got := Closest(c.name, names, c.within); got != c.want {
			t.Errorf("Closest(%q, within %d) = %q, want %q", c.name, c.within, got, c.want)
		}
	}
	// Equally near: the first in sorted order, whatever the order given.
	if got := Closest("ac", []string{"bc", "ab"}, 1); got != "ab" {
		t.Errorf("a tie gave %q, want ab", got)
	}
}
