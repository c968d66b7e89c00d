package main

import (
	"context"
	"fmt"
	"io"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
)

func init() {
	register("aws", "AWS helpers: the IAM policies bullpen needs, and the table and queues of several replicas", cmdAWS)
}

func awsUsage(w io.Writer) {
	fmt.Fprint(w, `usage: bullpen aws iam-policy [flags]
       bullpen aws bootstrap --store dynamodb://TABLE --queue sqs://PREFIX [flags]

iam-policy prints the least-privilege IAM policy of the control plane as
JSON: it reads instances, images, instance types, subnets and security groups;
it creates only machines, volumes and launch templates carrying its controller
tag, and starts, stops, terminates and tags only those; it passes only the
machines' instance role. With --instance-role it prints the trust policy of
that role instead: the agent calls no AWS API, so the role needs no permission
of bullpen's.

bootstrap creates the DynamoDB table and the SQS queues that several replicas
of serve share (--store dynamodb://TABLE --queue sqs://PREFIX).

Run 'bullpen aws iam-policy -h' or 'bullpen aws bootstrap -h' for their flags.
`)
}

func cmdAWS(ctx context.Context, e *env, args []string) int {
	return dispatch(ctx, e, "aws", args, awsUsage, map[string]subcommand{
		"iam-policy": func(_ context.Context, e *env, args []string) int { return awsIAMPolicy(e, args) },
		"bootstrap":  awsBootstrap,
	})
}

func awsIAMPolicy(e *env, args []string) int {
	fs := e.flags("aws iam-policy")
	environment := fs.String("environment", or(e.getenv("BULLPEN_ENVIRONMENT"), "production"), "the stack's environment, as given to serve")
	controller := fs.String("controller-id", e.getenv("BULLPEN_CONTROLLER_ID"), "the stack's controller id, as given to serve (default bullpen-ENVIRONMENT)")
	region := fs.String("aws-region", or(e.getenv("BULLPEN_AWS_REGION"), e.getenv("AWS_REGION")), "limit the policy to this region, as serve's --aws-region (default any)")
	fs.StringVar(region, "region", *region, "the same as --aws-region")
	account := fs.String("account", "", "limit the policy to this account id (default any)")
	role := fs.String("instance-role-arn", "", "ARN of the role of the machines' instance profile (--aws-instance-profile), the only role serve may pass")
	trust := fs.Bool("instance-role", false, "print the machines' role trust policy instead")
	store := fs.String("store", e.getenv("BULLPEN_STORE"), "with dynamodb://TABLE: allow the use of that table, as serve's --store")
	queue := fs.String("queue", e.getenv("BULLPEN_QUEUE"), "with sqs://PREFIX: allow the use of the queues under that prefix, as serve's --queue")
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	if *trust {
		fmt.Fprintf(e.stdout, "%s\n", ec2.InstanceRoleTrustPolicy())
		return 0
	}
	id := *controller
	if id == "" {
		id = "bullpen-" + *environment
	}
	extra, err := statePolicy(*store, *queue, *region, *account)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen aws iam-policy:", err)
		return 2
	}
	out, err := ec2.ControlPlanePolicy(ec2.PolicyParams{ControllerID: id, Region: *region, Account: *account, InstanceRoleARN: *role, Extra: extra})
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen aws iam-policy:", err)
		return 2
	}
	fmt.Fprintf(e.stdout, "%s\n", out)
	if *role == "" {
		// The policy is right for machines without a role; a serve given
		// --aws-instance-profile would be refused every launch.
		fmt.Fprintln(e.stderr, "bullpen aws iam-policy: note: without --instance-role-arn the policy lets serve pass no role: machines launched with --aws-instance-profile would be refused (iam:PassRole)")
	}
	return 0
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
