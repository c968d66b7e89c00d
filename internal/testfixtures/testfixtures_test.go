package testfixtures

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

func TestSignMatchesHMACSHA256(t *testing.T) {
	body := []byte(`{"action":"queued"}`)
	got := Sign(t, "It's a Secret to Everybody", body)
	mac := hmac.New(sha256.New, []byte("It's a Secret to Everybody"))
	mac.Write(body)
	if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); got != want {
		t.Fatalf("node signed %s, Go computes %s", got, want)
	}
}

func TestWorkflowJobExamples(t *testing.T) {
	if n := len(WorkflowJobExamples(t)); n < 4 {
		t.Fatalf("only %d workflow_job examples", n)
	}
}
