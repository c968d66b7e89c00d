package main

import (
	"context"
	"fmt"
	"strings"

	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/awsconf"
	"github.com/bullpen-ci/bullpen/internal/queue/sqs"
	"github.com/bullpen-ci/bullpen/internal/store/dynamodb"
)

// statePolicy is the IAM statements of the table and queues that --store
// and --queue name, if they name any.
func statePolicy(store, queue, region, account string) ([]awsconf.Statement, error) {
	var out []awsconf.Statement
	if table, ok := strings.CutPrefix(store, "dynamodb://"); ok && table != "" {
		out = append(out, dynamodb.Policy(region, account, table))
	} else if store != "" && !strings.HasPrefix(store, "sqlite://") {
		return nil, fmt.Errorf("--store %q: want dynamodb://TABLE", store)
	}
	if prefix, ok := strings.CutPrefix(queue, "sqs://"); ok {
		out = append(out, sqs.Policy(region, account, prefix))
	} else if queue != "" {
		return nil, fmt.Errorf("--queue %q: want sqs://PREFIX", queue)
	}
	return out, nil
}

// awsBootstrap creates the table and queues several replicas share.
func awsBootstrap(ctx context.Context, e *env, args []string) int {
	fs := e.flags("aws bootstrap")
	store := fs.String("store", e.getenv("BULLPEN_STORE"), "dynamodb://TABLE, as serve's --store")
	queue := fs.String("queue", e.getenv("BULLPEN_QUEUE"), "sqs://PREFIX, as serve's --queue")
	region := fs.String("aws-region", or(e.getenv("BULLPEN_AWS_REGION"), e.getenv("AWS_REGION")), "the region (default $AWS_REGION)")
	endpoint := fs.String("aws-endpoint", e.getenv("BULLPEN_AWS_ENDPOINT"), "send every AWS call here (an emulator such as moto)")
	if status, ok := e.parseFlags(fs, args); !ok {
		return status
	}
	_, shared, err := stateFlags{*store, *queue, *region, *endpoint}.parse()
	if err == nil && shared == nil {
		err = fmt.Errorf("--store %q: want dynamodb://TABLE", *store)
	}
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen aws bootstrap:", err)
		return 2
	}
	table, prefix := shared.Table, shared.QueuePrefix
	cfg, err := awsconf.Load(ctx, awsconf.Options{Region: *region, Endpoint: *endpoint})
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen aws bootstrap:", err)
		return 1
	}
	did, err := dynamodb.Ensure(ctx, awsdynamodb.NewFromConfig(cfg), table)
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen aws bootstrap:", err)
		return 1
	}
	fmt.Fprintf(e.stdout, "dynamodb table %s: %s\n", table, did)
	created, found, err := sqs.New(awssqs.NewFromConfig(cfg), prefix, sqs.Options{}).Ensure(ctx, app.FixedQueues)
	for _, q := range created {
		fmt.Fprintf(e.stdout, "sqs queue %s: created\n", q)
	}
	for _, q := range found {
		fmt.Fprintf(e.stdout, "sqs queue %s: found\n", q)
	}
	if err != nil {
		fmt.Fprintln(e.stderr, "bullpen aws bootstrap:", err)
		return 1
	}
	return 0
}
