package dynamodb_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/dynamodb"
)

// An interruption's row carries the time to live at which DynamoDB
// removes it, never before it expires: nothing else deletes it.
func TestAnInterruptionRowExpiresByTimeToLive(t *testing.T) {
	client, table := newTable(t)
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	s, err := dynamodb.New(client, table, clock.NewVirtual(at), dynamodb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	i := domain.Interruption{ID: "a", Runner: "spot-x64", At: at, Expires: at.Add(75*time.Minute + 500*time.Millisecond)}
	if err := s.RecordInterruption(t.Context(), i); err != nil {
		t.Fatal(err)
	}
	out, err := client.Query(t.Context(), &awsdynamodb.QueryInput{
		TableName: aws.String(table), KeyConditionExpression: aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "interruptions"}},
	})
	if err != nil || len(out.Items) != 1 {
		t.Fatalf("the interruptions' partition: %v, %v; want one row", out, err)
	}
	ttl, ok := out.Items[0]["ttl"].(*types.AttributeValueMemberN)
	// The expiry, rounded up to its second.
	if want := strconv.FormatInt(at.Add(75*time.Minute+time.Second).Unix(), 10); !ok || ttl.Value != want {
		t.Fatalf("row's ttl %v, want %s", out.Items[0]["ttl"], want)
	}
}
