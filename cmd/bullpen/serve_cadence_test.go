package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A pool's autoscaler polls on converger cycles: a converger slower than
// the example's autoscale block allows would never scale it, and serve
// refuses to start that way (status 78, EX_CONFIG: a restart does not mend it).
func TestServeRefusesAutoscalingItsConvergerCannotPoll(t *testing.T) {
	vars := map[string]string{"BULLPEN_WEBHOOK_SECRET": "s", "BULLPEN_ADMIN_TOKEN": "test-admin-token"}
	code, _, errOut := runWithEnv(vars, "serve", "--config", "../../examples/runs-on.yml", "--environment", "dev",
		"--converge-every", "2m", "--listen", "127.0.0.1:0", "--store", "sqlite://"+filepath.Join(t.TempDir(), "b.db"))
	if code != 78 || !strings.Contains(errOut, "burst-x64") || !strings.Contains(errOut, "converger cycle of 2m0s") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
}
