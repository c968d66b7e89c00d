package sqs

import (
	"cmp"
	"fmt"
	"reflect"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
)

// Policy is the IAM statement that lets serve use the queues under prefix:
// the calls of API on those queues only. CreateQueue is among them because
// resource-pool queues are created on first use.
func Policy(region, account, prefix string) awsconf.Statement {
	return awsconf.Statement{
		Sid: "QueuesInSQS", Effect: "Allow",
		Action: awsconf.Actions("sqs", reflect.TypeFor[API](), map[string][]string{
			"SendMessageBatch":   {"SendMessage"},
			"DeleteMessageBatch": {"DeleteMessage"},
		}),
		Resource: []string{fmt.Sprintf("arn:aws:sqs:%s:%s:%s*", cmp.Or(region, "*"), cmp.Or(account, "*"), prefix)},
	}
}
