package dynamodb

import (
	"cmp"
	"fmt"
	"reflect"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
)

// Policy is the IAM statement that lets serve use table: the calls of API
// (and Open's DescribeTable and DescribeTimeToLive) on the table and its
// indexes, nothing else. Creating the table is `bullpen aws bootstrap`'s, run by an
// administrator.
func Policy(region, account, table string) awsconf.Statement {
	arn := fmt.Sprintf("arn:aws:dynamodb:%s:%s:table/%s", cmp.Or(region, "*"), cmp.Or(account, "*"), table)
	return awsconf.Statement{
		Sid: "StateInDynamoDB", Effect: "Allow",
		Action: append(awsconf.Actions("dynamodb", reflect.TypeFor[API](), map[string][]string{
			"TransactWriteItems": {"PutItem", "UpdateItem"}, // what the store's transactions hold
		}), "dynamodb:DescribeTable", "dynamodb:DescribeTimeToLive"),
		Resource: []string{arn, arn + "/index/*"},
	}
}
