package dynamodb_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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

// TestContract runs the store's contract as configured by default, and
// with no row remembered (every change decided on a row read for it).
func TestContract(t *testing.T) {
	for name, opts := range map[string]dynamodb.Options{"Default": {}, "ReadEveryChange": {Recent: -1}} {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, clk *clock.Virtual) domain.Store {
				client, table := newTable(t)
				s, err := dynamodb.Open(t.Context(), client, table, clk, opts)
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}

// A missing table is named at start, with what to run.
func TestOpenNamesAMissingTable(t *testing.T) {
	client := awsdynamodb.NewFromConfig(mototest.Config(t))
	_, err := dynamodb.Open(t.Context(), client, "bullpen-no-such-table", clock.NewVirtual(time.Now()), dynamodb.Options{})
	if !errors.Is(err, dynamodb.ErrNoTable) || !strings.Contains(err.Error(), "bullpen-no-such-table") || !strings.Contains(err.Error(), "bullpen aws bootstrap") {
		t.Fatalf("open on a missing table: %v; want ErrNoTable naming it and the bootstrap command", err)
	}
}

// A table made by other tooling without bullpen's indexes is refused by
// Open and by bootstrap, naming what is missing and what to do, rather
// than failing the queries of the missing indexes at run time.
func TestATableWithoutTheIndexesIsRefused(t *testing.T) {
	client := awsdynamodb.NewFromConfig(mototest.Config(t))
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	table := "bullpen-no-indexes-" + hex.EncodeToString(b)
	_, err := client.CreateTable(t.Context(), &awsdynamodb.CreateTableInput{
		TableName: aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &awsdynamodb.DeleteTableInput{TableName: &table})
	})
	_, oerr := dynamodb.Open(t.Context(), client, table, clock.NewVirtual(time.Now()), dynamodb.Options{})
	_, eerr := dynamodb.Ensure(t.Context(), client, table)
	for what, err := range map[string]error{"open": oerr, "bootstrap": eerr} {
		if !errors.Is(err, dynamodb.ErrTableLayout) || !strings.Contains(err.Error(), table) ||
			!strings.Contains(err.Error(), "index by-pool is missing") || !strings.Contains(err.Error(), "bullpen aws bootstrap") {
			t.Errorf("%s of a table without indexes: %v; want ErrTableLayout naming the table, the missing index and the fix", what, err)
		}
	}
}

// A table whose time to live is off works, and Open says it keeps what
// bullpen's clean-up misses.
func TestOpenWarnsOfATimeToLiveThatIsOff(t *testing.T) {
	client, table := newTable(t)
	_, err := client.UpdateTimeToLive(t.Context(), &awsdynamodb.UpdateTimeToLiveInput{TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("ttl"), Enabled: aws.Bool(false)}})
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	if _, err := dynamodb.Open(t.Context(), client, table, clock.NewVirtual(time.Now()), dynamodb.Options{Log: log}); err != nil {
		t.Fatalf("open with time to live off: %v", err)
	}
	if got := logged.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "time to live") || !strings.Contains(got, table) {
		t.Fatalf("logged %q; want a warning naming the table and its time to live", got)
	}
	logged.Reset()
	if _, err := dynamodb.Ensure(t.Context(), client, table); err != nil {
		t.Fatal(err)
	}
	if _, err := dynamodb.Open(t.Context(), client, table, clock.NewVirtual(time.Now()), dynamodb.Options{Log: log}); err != nil || logged.Len() != 0 {
		t.Fatalf("open once bootstrap turned time to live on: %v, logged %q; want nothing", err, logged.String())
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

// behindGate opens a store on table through a gate in front of the
// emulator, its SDK making up to attempts attempts of a call.
func behindGate(t *testing.T, table string, attempts int) (*dynamodb.Store, *mototest.Gate, *clock.Virtual) {
	t.Helper()
	gate := mototest.NewGate(t)
	cfg := mototest.Config(t)
	cfg.BaseEndpoint, cfg.RetryMaxAttempts = aws.String(gate.URL), attempts
	clk := clock.NewVirtual(time.Now())
	s, err := dynamodb.New(awsdynamodb.NewFromConfig(cfg), table, clk, dynamodb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s, gate, clk
}

// DynamoDB failing (down, throttling, refusing the credentials or a
// permission) is an error naming the call, the table and what to do, and
// the same store works again once DynamoDB answers: nothing is left half
// done or cached as failed.
func TestFailuresAreNamedAndTheStoreRecovers(t *testing.T) {
	_, table := newTable(t)
	s, gate, _ := behindGate(t, table, 1)
	for i, c := range mototest.Refusals {
		in := domain.Instance{ID: fmt.Sprintf("bp-%d", i), State: domain.StateReady, Runner: "small"}
		gate.Fail(c.Fault)
		err := s.CreateInstances(t.Context(), []domain.Instance{in})
		if err == nil || !strings.Contains(err.Error(), "TransactWriteItems") || !strings.Contains(err.Error(), table) ||
			!strings.Contains(err.Error(), c.Says) || (c.Kind != nil && !errors.Is(err, c.Kind)) {
			t.Errorf("create answered %s: %v; want an error naming TransactWriteItems, the table and %q", c.Fault.Code, err, c.Says)
		}
		if _, err := s.ListInstances(t.Context(), domain.InstanceFilter{}); err == nil || (c.Kind != nil && !errors.Is(err, c.Kind)) {
			t.Errorf("list answered %s: %v", c.Fault.Code, err)
		}
		gate.Pass()
		if _, err := s.GetInstance(t.Context(), in.ID); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("the refused create left a row: %v", err)
		}
		if err := s.CreateInstances(t.Context(), []domain.Instance{in}); err != nil {
			t.Fatalf("create once DynamoDB answers again after %s: %v", c.Fault.Code, err)
		}
	}
}

// A put whose answer is lost is tried again by the SDK and refused by its
// own first attempt: the job was still created by this call.
func TestAJobCreatedWhoseAnswerWasLostCountsAsCreated(t *testing.T) {
	_, table := newTable(t)
	s, gate, clk := behindGate(t, table, 3)
	gate.LoseAnswers(1)
	created, err := s.CreateJobs(t.Context(), []domain.Job{{ID: 7, Status: domain.JobQueued, Name: "build"}})
	if err != nil || len(created) != 1 || !created[0] {
		t.Fatalf("create whose first answer was lost: %v, %v; want created", created, err)
	}
	clk.Advance(time.Millisecond) // a redelivery comes later
	if created, err := s.CreateJobs(t.Context(), []domain.Job{{ID: 7, Status: domain.JobQueued, Name: "build"}}); err != nil || created[0] {
		t.Fatalf("a second create of the job: %v, %v; want not created", created, err)
	}
}

// A transaction whose answer is lost is sent again by the SDK with the
// same client request token, which DynamoDB answers as done: the rows of
// a create are written once and the create succeeds.
func TestInstancesCreatedWhoseAnswerWasLostAreCreated(t *testing.T) {
	_, table := newTable(t)
	s, gate, _ := behindGate(t, table, 3)
	gate.LoseAnswers(1)
	ins := []domain.Instance{{ID: "bp-a", State: domain.StateReady, Runner: "small"}, {ID: "bp-b", State: domain.StateReady, Runner: "small"}}
	if err := s.CreateInstances(t.Context(), ins); err != nil {
		t.Fatalf("create whose first answer was lost: %v; want created", err)
	}
	for _, in := range ins {
		if got, err := s.GetInstance(t.Context(), in.ID); err != nil || got.Version != 1 {
			t.Fatalf("instance %s after the create: version %d, %v; want version 1", in.ID, got.Version, err)
		}
	}
	if err := s.CreateInstances(t.Context(), ins[:1]); !errors.Is(err, domain.ErrExists) {
		t.Fatalf("a second create of the instance: %v; want ErrExists", err)
	}
}

// An update whose answer is lost is sent again by the SDK and refused by
// its own first attempt, which raised the row's version. The row's write
// mark shows it is this very write: the transition succeeded, once, and is
// neither applied twice nor reported as lost to a competitor.
func TestATransitionWhoseAnswerWasLostSucceedsOnce(t *testing.T) {
	_, table := newTable(t)
	s, gate, _ := behindGate(t, table, 3)
	in := domain.Instance{ID: "bp-lost", State: domain.StateReady, Runner: "small", Deadline: time.Now().Add(time.Hour)}
	if err := s.CreateInstances(t.Context(), []domain.Instance{in}); err != nil {
		t.Fatal(err)
	}
	cur, err := s.GetInstance(t.Context(), in.ID)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	got, err := s.Transition(t.Context(), in.ID, domain.GuardOf(cur), func(i *domain.Instance) {
		applied++
		i.State, i.JobsServed = domain.StateClaimed, i.JobsServed+1
		gate.LoseAnswers(1) // the update that follows lands, its answer does not
	})
	if err != nil {
		t.Fatalf("transition whose answer was lost: %v; want it done", err)
	}
	after, err := s.GetInstance(t.Context(), in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if applied != 1 || after.JobsServed != 1 || after.State != domain.StateClaimed || after.Version != cur.Version+1 || got.Version != after.Version {
		t.Fatalf("applied %d times; row %s, %d jobs, version %d (returned %d); want claimed once at version %d",
			applied, after.State, after.JobsServed, after.Version, got.Version, cur.Version+1)
	}
}
