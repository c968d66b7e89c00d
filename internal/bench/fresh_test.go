package bench

import (
	"strings"
	"testing"
	"time"

	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
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
