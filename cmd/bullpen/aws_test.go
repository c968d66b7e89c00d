package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAWSIAMPolicy(t *testing.T) {
	code, out, errOut := runCmd(t, "aws", "iam-policy", "--environment", "dev", "--region", "eu-west-1",
		"--instance-role-arn", "arn:aws:iam::123456789012:role/runner")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var p struct{ Statement []json.RawMessage }
	if err := json.Unmarshal([]byte(out), &p); err != nil || len(p.Statement) == 0 {
		t.Fatalf("not a policy (%v):\n%s", err, out)
	}
	for _, want := range []string{`"aws:RequestTag/bullpen:controller": "bullpen-dev"`, "arn:aws:ec2:eu-west-1:*:instance/*", "role/runner"} {
		if !strings.Contains(out, want) {
			t.Errorf("the policy lacks %s:\n%s", want, out)
		}
	}
	// --aws-region, as serve names it, is the same flag.
	if code, same, _ := runCmd(t, "aws", "iam-policy", "--environment", "dev", "--aws-region", "eu-west-1",
		"--instance-role-arn", "arn:aws:iam::123456789012:role/runner"); code != 0 || same != out {
		t.Errorf("--aws-region: exit %d, a policy other than --region's:\n%s", code, same)
	}
	if code, _, errOut := runCmd(t, "aws", "iam-policy", "--instance-role-arn", "runner"); code != 2 || !strings.Contains(errOut, "not a role ARN") {
		t.Errorf("a role name instead of an ARN: exit %d, %q", code, errOut)
	}
	if strings.Contains(errOut, "PassRole") {
		t.Errorf("a note about passing a role, with the role given: %s", errOut)
	}
	if code, out, errOut := runCmd(t, "aws", "iam-policy"); code != 0 || strings.Contains(out, "PassRole") || !strings.Contains(errOut, "without --instance-role-arn") {
		t.Errorf("without a role: exit %d, stderr %q; want the policy, and a note that no role may be passed", code, errOut)
	}
	if code, out, _ := runCmd(t, "aws", "iam-policy", "--instance-role"); code != 0 || !strings.Contains(out, "ec2.amazonaws.com") {
		t.Errorf("trust policy: exit %d\n%s", code, out)
	}
}
