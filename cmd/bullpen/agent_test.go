package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// The launch data's unit does not restart the agent after status 2: a
// config file that cannot be read, which may be readable at the next
// start, is 1; settings that cannot work are 2.
func TestAgentExitsOneForAnUnreadableConfigAndTwoForBadSettings(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "agent.env")
	if code, _, errs := runCmd(t, "agent", "--config", missing); code != exitAgentFailed || !strings.Contains(errs, "agent.env") {
		t.Errorf("a config file that is not there: exit %d, stderr %q; want %d naming it", code, errs, exitAgentFailed)
	}
	if code, _, errs := runCmd(t, "agent", "--heartbeat-interval", "soon"); code != exitAgentUsage {
		t.Errorf("a setting that does not parse: exit %d, stderr %q; want %d", code, errs, exitAgentUsage)
	}
}
