package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// The launch data's unit does not restart the agent after settings that
// cannot work, and shuts its machine down: they exit 78 (EX_CONFIG), never
// 2, which Go gives a crash, restarted. A config file that cannot be read,
// which may be readable at the next start, is 1.
func TestAgentExitsOneForAnUnreadableConfigAndSeventyEightForBadSettings(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "agent.env")
	if code, _, errs := runCmd(t, "agent", "--config", missing); code != exitAgentFailed || !strings.Contains(errs, "agent.env") {
		t.Errorf("a config file that is not there: exit %d, stderr %q; want %d naming it", code, errs, exitAgentFailed)
	}
	if code, _, errs := runCmd(t, "agent", "--heartbeat-interval", "soon"); code != 78 {
		t.Errorf("a setting that does not parse: exit %d, stderr %q; want 78", code, errs)
	}
	if code, out, _ := runCmd(t, "agent", "-h"); code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), "78 (EX_CONFIG) settings that cannot work") {
		t.Errorf("agent -h: exit %d, want its exit statuses told:\n%s", code, out)
	}
}
