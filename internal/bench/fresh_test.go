package bench

import (
	"strings"
	"testing"
	"time"

	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/queue/sqs"
	"github.com/bullpen-ci/bullpen/internal/store/dynamodb"
)

// A table an earlier run left jobs in is refused, naming what it holds; a
// fresh one is taken.
func TestBenchNeedsAFreshTable(t *testing.T) {
	client := awsdynamodb.NewFromConfig(mototest.Config(t))
	table := "bench-fresh-" + strings.ReplaceAll(t.Name(), "/", "-")
	if _, err := dynamodb.Ensure(t.Context(), client, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = client.DeleteTable(t.Context(), &awsdynamodb.DeleteTableInput{TableName: &table}) })
	st, err := dynamodb.New(client, table, clock.Real{}, dynamodb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh(t.Context(), st, table); err != nil {
		t.Fatalf("a new table: %v", err)
	}
	now := time.Now()
	if _, err := st.CreateJobs(t.Context(), []domain.Job{{ID: 1_000_000, Status: domain.JobQueued, Labels: []string{"runs-on=1/pool=bench"},
		CreatedAt: now, UpdatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	err = fresh(t.Context(), st, table)
	if err == nil || !strings.Contains(err.Error(), "holds 1 jobs and 0 instances from an earlier run") {
		t.Fatalf("a used table: %v", err)
	}
}

// A burst on DynamoDB and SQS reports their calls per job, each a figure
// of what they bill by.
func TestABurstOnSharedStateCountsItsCallsPerJob(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test") // the emulator takes any
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	client := awsdynamodb.NewFromConfig(mototest.Config(t))
	name := "bench-calls-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if _, err := dynamodb.Ensure(t.Context(), client, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = client.DeleteTable(t.Context(), &awsdynamodb.DeleteTableInput{TableName: &name}) })
	if _, _, err := sqs.New(awssqs.NewFromConfig(mototest.Config(t)), name+"-", sqs.Options{}).Ensure(t.Context(), app.FixedQueues); err != nil {
		t.Fatal(err)
	}
	res, err := Run(t.Context(), Options{Jobs: 5, CASOps: 20, Timeout: time.Minute, Dir: t.TempDir(), Only: "pool_burst",
		Shared: &app.Shared{Table: name, QueuePrefix: name + "-", Region: mototest.Region, Endpoint: mototest.Endpoint(t)}})
	if err != nil {
		t.Fatal(err)
	}
	calls := res.Scenarios["pool_burst"].AWSCallsPerJob
	for _, op := range []string{"DynamoDB:GetItem", "DynamoDB:TransactWriteItems", "SQS:SendMessageBatch", "SQS:ReceiveMessage"} {
		if calls[op] <= 0 {
			t.Errorf("%s per job: %v; want some (all: %v)", op, calls[op], calls)
		}
	}
	for op := range calls {
		if strings.HasPrefix(op, "EC2:") || !strings.Contains(op, ":") {
			t.Errorf("%s among the shared state's calls", op)
		}
	}
}
