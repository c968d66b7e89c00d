package ec2_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
	"github.com/bullpen-ci/bullpen/internal/domain"
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

// IAM checks a request-tag condition on each resource a call creates
// against the tags the request gives that resource's type. Every resource
// a spot fleet creates must be allowed by a statement without a condition,
// or by one whose request-tag condition the provider's own fleet request
// meets for that resource.
func TestPolicyAllowsTheFleetRequestTheProviderMakes(t *testing.T) {
	f := newFake()
	spot := small
	spot.Spot = "price-capacity-optimized"
	if _, err := newFakeCloud(t, f, ec2.Options{}).Create(t.Context(), launchSpec(1, spot)); err != nil {
		t.Fatal(err)
	}
	tagged := map[string]string{} // controller tag by resource type
	for _, ts := range f.fleets[0].TagSpecifications {
		for _, tag := range ts.Tags {
			if aws.ToString(tag.Key) == domain.TagController {
				tagged[string(ts.ResourceType)] = aws.ToString(tag.Value)
			}
		}
	}
	p := parsePolicy(t, ec2.PolicyParams{ControllerID: "c", Region: "eu-west-1", Account: "123456789012"})
	for _, kind := range []string{"fleet", "instance", "volume", "spot-instances-request"} {
		allowed := false
		for _, s := range p.Statement {
			if !slices.Contains(s.Action, "ec2:CreateFleet") || !slices.ContainsFunc(s.Resource, func(r string) bool {
				return strings.HasSuffix(r, ":"+kind+"/*")
			}) {
				continue
			}
			want, conditioned := s.Condition["StringEquals"]["aws:RequestTag/"+domain.TagController]
			if len(s.Condition) == 0 || (conditioned && len(s.Condition["StringEquals"]) == 1 && tagged[kind] == want) {
				allowed = true
			}
		}
		if !allowed {
			t.Errorf("CreateFleet creates a %s the policy does not allow as the request tags it (controller tag %q)", kind, tagged[kind])
		}
	}
}
