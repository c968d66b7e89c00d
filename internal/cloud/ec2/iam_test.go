package ec2_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
)

type testPolicy struct {
	Statement []struct {
		Sid       string
		Action    []string
		Resource  []string
		Condition map[string]map[string]any
	}
}

func parsePolicy(t *testing.T, p ec2.PolicyParams) testPolicy {
	t.Helper()
	raw, err := ec2.ControlPlanePolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	var out testPolicy
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("the policy is not JSON: %v\n%s", err, raw)
	}
	return out
}

// Every EC2 call the provider can make is allowed by the policy: a call
// added to the API interface without its permission fails here.
func TestPolicyAllowsEveryCallTheProviderMakes(t *testing.T) {
	p := parsePolicy(t, ec2.PolicyParams{ControllerID: "bullpen-prod", Region: "eu-west-1", Account: "123456789012"})
	allowed := map[string]bool{}
	for _, s := range p.Statement {
		for _, a := range s.Action {
			allowed[a] = true
		}
	}
	api := reflect.TypeFor[ec2.API]()
	for i := range api.NumMethod() {
		if name := "ec2:" + api.Method(i).Name; !allowed[name] {
			t.Errorf("the provider calls %s, which the policy does not allow", name)
		}
	}
}

// Mutations are limited to resources carrying the controller's tag, on
// the request or on the resource.
func TestPolicyMutatesOnlyTaggedResources(t *testing.T) {
	p := parsePolicy(t, ec2.PolicyParams{ControllerID: "bullpen-prod"})
	for _, s := range p.Statement {
		for _, a := range s.Action {
			mutating := slices.Contains([]string{"ec2:StartInstances", "ec2:StopInstances", "ec2:TerminateInstances",
				"ec2:CreateLaunchTemplateVersion", "ec2:DeleteLaunchTemplateVersions"}, a)
			if !mutating {
				continue
			}
			cond := s.Condition["StringEquals"]
			if cond["aws:ResourceTag/bullpen:controller"] != "bullpen-prod" {
				t.Errorf("statement %s allows %s without the controller tag condition: %v", s.Sid, a, s.Condition)
			}
		}
		if s.Sid == "CreateTaggedMachines" && s.Condition["StringEquals"]["aws:RequestTag/bullpen:controller"] != "bullpen-prod" {
			t.Errorf("creation is not conditioned on the request tag: %v", s.Condition)
		}
		for _, r := range s.Resource {
			if r == "*" && !strings.HasPrefix(s.Sid, "Read") && s.Sid != "SpotServiceRole" {
				t.Errorf("statement %s applies to every resource", s.Sid)
			}
		}
	}
}

func TestPolicyPassesOnlyTheInstanceRole(t *testing.T) {
	const role = "arn:aws:iam::123456789012:role/bullpen-runner"
	p := parsePolicy(t, ec2.PolicyParams{ControllerID: "c", InstanceRoleARN: role})
	var found bool
	for _, s := range p.Statement {
		if slices.Contains(s.Action, "iam:PassRole") {
			found = true
			if !slices.Equal(s.Resource, []string{role}) || s.Condition["StringEquals"]["iam:PassedToService"] != "ec2.amazonaws.com" {
				t.Errorf("PassRole on %v with %v", s.Resource, s.Condition)
			}
		}
	}
	if !found {
		t.Error("no iam:PassRole for the instance role")
	}
	if _, err := ec2.ControlPlanePolicy(ec2.PolicyParams{ControllerID: "c", InstanceRoleARN: "bullpen-runner"}); err == nil {
		t.Error("a role name that is not an ARN was accepted")
	}
	if _, err := ec2.ControlPlanePolicy(ec2.PolicyParams{}); err == nil {
		t.Error("a policy without a controller id was made")
	}
}
