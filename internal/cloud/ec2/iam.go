package ec2

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// PolicyParams scope the control plane's IAM policy.
type PolicyParams struct {
	ControllerID string // the value of every machine's controller tag
	Region       string // "*" when empty
	Account      string // "*" when empty
	// InstanceRoleARN is the role of the machines' instance profile, the
	// only role the control plane may pass; "" when machines have none.
	InstanceRoleARN string
	// Extra statements are appended: those of the DynamoDB store and the
	// SQS queues when serve keeps its state there.
	Extra []awsconf.Statement
}

type statement = awsconf.Statement

type policy struct {
	Version   string      `json:"Version"`
	Statement []statement `json:"Statement"`
}

// ControlPlanePolicy is the least-privilege policy of bullpen's control
// plane: it reads what it must, creates only what carries its controller
// tag, and starts, stops, terminates and tags only what already carries it.
func ControlPlanePolicy(p PolicyParams) ([]byte, error) {
	if p.ControllerID == "" {
		return nil, errors.New("iam policy: no controller id")
	}
	region, account := or(p.Region, "*"), or(p.Account, "*")
	arn := func(kind string) string { return fmt.Sprintf("arn:aws:ec2:%s:%s:%s/*", region, account, kind) }
	own := func(kinds ...string) []string {
		var out []string
		for _, k := range kinds {
			out = append(out, arn(k))
		}
		return out
	}
	tagged := func(key string) map[string]map[string]any {
		return map[string]map[string]any{"StringEquals": {key + "/" + domain.TagController: p.ControllerID}}
	}
	statements := []statement{
		{Sid: "Read", Effect: "Allow", Resource: []string{"*"}, Action: []string{
			"ec2:DescribeInstances", "ec2:DescribeImages", "ec2:DescribeInstanceTypes", "ec2:DescribeSubnets",
			"ec2:DescribeSecurityGroups", "ec2:DescribeLaunchTemplates", "ec2:DescribeLaunchTemplateVersions"}},
		// IAM checks aws:RequestTag on each resource the call creates
		// against the tags the request gives that resource's type: the
		// fleet request tags the fleet itself as well as its instances and
		// volumes (fleetTagSpecifications), or the fleet is refused.
		{Sid: "CreateTaggedMachines", Effect: "Allow", Action: []string{"ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate"},
			Resource: own("instance", "volume", "fleet", "launch-template"), Condition: tagged("aws:RequestTag")},
		{Sid: "LaunchIntoTheNetwork", Effect: "Allow", Action: []string{"ec2:CreateFleet", "ec2:RunInstances"},
			Resource: append(own("subnet", "security-group", "network-interface", "key-pair"),
				fmt.Sprintf("arn:aws:ec2:%s::image/*", region), fmt.Sprintf("arn:aws:ec2:%s:%s:image/*", region, account))},
		// A spot launch also makes spot instance requests, which a fleet
		// request cannot tag (its tag specifications take the fleet, its
		// instances and their volumes): a request-tag condition would never
		// hold for them. They come only with the tagged instances above.
		{Sid: "LaunchSpotRequests", Effect: "Allow", Action: []string{"ec2:CreateFleet", "ec2:RunInstances"},
			Resource: own("spot-instances-request")},
		{Sid: "LaunchFromOwnTemplates", Effect: "Allow", Action: []string{"ec2:CreateFleet", "ec2:RunInstances"},
			Resource: own("launch-template"), Condition: tagged("aws:ResourceTag")},
		{Sid: "TagOnCreate", Effect: "Allow", Action: []string{"ec2:CreateTags"}, Resource: own("instance", "volume", "fleet", "launch-template"),
			Condition: map[string]map[string]any{"StringEquals": {"ec2:CreateAction": []string{"CreateFleet", "RunInstances", "CreateLaunchTemplate"}}}},
		{Sid: "ManageOwnMachines", Effect: "Allow", Resource: own("instance", "volume", "launch-template"), Condition: tagged("aws:ResourceTag"),
			Action: []string{"ec2:StartInstances", "ec2:StopInstances", "ec2:TerminateInstances", "ec2:CreateTags",
				"ec2:CreateLaunchTemplateVersion", "ec2:DeleteLaunchTemplateVersions"}},
		{Sid: "SpotServiceRole", Effect: "Allow", Action: []string{"iam:CreateServiceLinkedRole"}, Resource: []string{"*"},
			Condition: map[string]map[string]any{"StringEquals": {"iam:AWSServiceName": "spot.amazonaws.com"}}},
	}
	if p.InstanceRoleARN != "" {
		if !strings.HasPrefix(p.InstanceRoleARN, "arn:") || !strings.Contains(p.InstanceRoleARN, ":role/") {
			return nil, fmt.Errorf("iam policy: %q is not a role ARN (arn:aws:iam::ACCOUNT:role/NAME)", p.InstanceRoleARN)
		}
		statements = append(statements, statement{Sid: "PassTheInstanceRole", Effect: "Allow", Action: []string{"iam:PassRole"},
			Resource:  []string{p.InstanceRoleARN},
			Condition: map[string]map[string]any{"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}})
	}
	statements = append(statements, p.Extra...)
	return json.MarshalIndent(policy{Version: "2012-10-17", Statement: statements}, "", "  ")
}

// InstanceRoleTrustPolicy lets EC2 assume the machines' role. The agent
// calls no AWS API (its instance id, identity document and interruption
// notices come from the metadata service, which needs no permission), so
// the role needs no permission policy of bullpen's; give it only what your
// jobs need.
func InstanceRoleTrustPolicy() []byte {
	b, _ := json.MarshalIndent(map[string]any{"Version": "2012-10-17", "Statement": []map[string]any{{
		"Effect": "Allow", "Principal": map[string]string{"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}}}, "", "  ")
	return b
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
