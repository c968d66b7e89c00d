package dynamodb_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bullpen-ci/bullpen/internal/awsconf/mototest"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/dynamodb"
	"github.com/bullpen-ci/bullpen/internal/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(mototest.Main(m)) }

// newTable creates a table of its own on the emulator and returns its name.
func newTable(t *testing.T) (*awsdynamodb.Client, string) {
	t.Helper()
	client := awsdynamodb.NewFromConfig(mototest.Config(t))
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	table := "bullpen-test-" + hex.EncodeToString(b)
	did, err := dynamodb.Ensure(t.Context(), client, table)
	if err != nil {
		t.Fatalf("ensure table: %v", err)
	}
	if did != "created" {
		t.Fatalf("ensure a new table: %s, want created", did)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteTable(t.Context(), &awsdynamodb.DeleteTableInput{TableName: &table})
	})
	return client, table
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *clock.Virtual) domain.Store {
		client, table := newTable(t)
		s, err := dynamodb.Open(t.Context(), client, table, clk, dynamodb.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
