package dynamodb_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
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

// A missing table is named at start, with what to run.
func TestOpenNamesAMissingTable(t *testing.T) {
	client := awsdynamodb.NewFromConfig(mototest.Config(t))
	_, err := dynamodb.Open(t.Context(), client, "bullpen-no-such-table", clock.NewVirtual(time.Now()), dynamodb.Options{})
	if !errors.Is(err, dynamodb.ErrNoTable) || !strings.Contains(err.Error(), "bullpen-no-such-table") || !strings.Contains(err.Error(), "bullpen aws bootstrap") {
		t.Fatalf("open on a missing table: %v; want ErrNoTable naming it and the bootstrap command", err)
	}
}

// Ensure on an existing table finds it and changes nothing.
func TestEnsureTwiceFindsTheTable(t *testing.T) {
	client, table := newTable(t)
	did, err := dynamodb.Ensure(t.Context(), client, table)
	if err != nil || did != "found" {
		t.Fatalf("second ensure: %q, %v; want found", did, err)
	}
}

// DynamoDB failing is an error naming the call and the table, and the
// same store works again once DynamoDB answers: nothing is left half done
// or cached as failed.
func TestAnOutageIsReportedAndTheStoreRecovers(t *testing.T) {
	_, table := newTable(t)
	target, err := url.Parse(mototest.Endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	proxy := httputil.NewSingleHostReverseProxy(target)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(gate.Close)
	cfg := mototest.Config(t)
	cfg.BaseEndpoint, cfg.RetryMaxAttempts = aws.String(gate.URL), 1
	s, err := dynamodb.New(awsdynamodb.NewFromConfig(cfg), table, clock.NewVirtual(time.Now()), dynamodb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := domain.Instance{ID: "bp-1", State: domain.StateReady, Runner: "small"}
	down.Store(true)
	if err := s.CreateInstances(t.Context(), []domain.Instance{in}); err == nil || !strings.Contains(err.Error(), "TransactWriteItems") || !strings.Contains(err.Error(), table) {
		t.Fatalf("create during the outage: %v; want an error naming TransactWriteItems and the table", err)
	}
	down.Store(false)
	if _, err := s.GetInstance(t.Context(), "bp-1"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the refused create left a row: %v", err)
	}
	if err := s.CreateInstances(t.Context(), []domain.Instance{in}); err != nil {
		t.Fatalf("create once DynamoDB answers: %v", err)
	}
}
