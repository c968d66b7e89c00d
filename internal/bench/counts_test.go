package bench

import (
	"maps"
	"strings"
	"testing"
	"time"

	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/app"
	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
	"github.com/bullpen-ci/bullpen/internal/queue/sqs"
	"github.com/bullpen-ci/bullpen/internal/store/dynamodb"
)

// The calls and the refused writes of a burst are what their counters
// grew by, per job, each series under its labels; series that did not
// grow are left out.
func TestSharedStateFiguresPerJob(t *testing.T) {
	reg := prometheus.NewRegistry()
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bullpen_aws_calls_total"}, []string{"service", "operation"})
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bullpen_store_refused_writes_total"}, []string{"row", "remembered"})
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "bullpen_other_total"})
	reg.MustRegister(calls, refused, other)
	calls.WithLabelValues("DynamoDB", "GetItem").Add(3)
	calls.WithLabelValues("SQS", "ReceiveMessage").Add(1)
	refused.WithLabelValues("job", "false")
	before := gatherCounts(reg)
	calls.WithLabelValues("DynamoDB", "GetItem").Add(8)
	refused.WithLabelValues("instance", "true").Add(2)
	other.Add(5)
	after := gatherCounts(reg)
	if got, want := perJob(before, after, "bullpen_aws_calls_total", 4), map[string]float64{"DynamoDB:GetItem": 2}; !maps.Equal(got, want) {
		t.Errorf("calls per job %v, want %v", got, want)
	}
	if got, want := perJob(before, after, "bullpen_store_refused_writes_total", 4), map[string]float64{"instance:true": 0.5}; !maps.Equal(got, want) {
		t.Errorf("refused writes per job %v, want %v", got, want)
	}
	if _, ok := after["bullpen_other_total"]; ok {
		t.Error("another family was read")
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
