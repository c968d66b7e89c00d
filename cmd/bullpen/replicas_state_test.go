package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
)

// sharedState returns the flags that put both replicas on one store: a
// SQLite file they share, or, onAWS, a DynamoDB table and SQS queues of
// the run's own on the emulator, created with `bullpen aws bootstrap` (the
// emulator's credentials are in the environment already).
func sharedState(t *testing.T, bin, run, endpoint string, onAWS bool) []string {
	t.Helper()
	if !onAWS {
		return []string{"--store", "sqlite://" + filepath.Join(t.TempDir(), "shared.db")}
	}
	flags := []string{"--store", "dynamodb://bullpen-replicas-" + run, "--queue", "sqs://bullpen-replicas-" + run + "-"}
	cmd := exec.Command(bin, append([]string{"aws", "bootstrap", "--aws-region", mototest.Region, "--aws-endpoint", endpoint}, flags...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bullpen aws bootstrap: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "dynamodb table bullpen-replicas-"+run+": created") {
		t.Fatalf("bullpen aws bootstrap did not create the table:\n%s", out)
	}
	t.Logf("bullpen aws bootstrap:\n%s", out)
	return flags
}
