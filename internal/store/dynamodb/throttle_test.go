package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/awsconf"
	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// throttling is a table DynamoDB throttles inside its answers: a batch
// does at most perAnswer of its items (none while stalls last), and a
// transaction is cancelled for throughput while cancels last.
type throttling struct {
	API
	stalls, perAnswer, cancels int
	batches, transactions      int
}

func (f *throttling) BatchGetItem(_ context.Context, in *awsdynamodb.BatchGetItemInput, _ ...func(*awsdynamodb.Options)) (*awsdynamodb.BatchGetItemOutput, error) {
	out := &awsdynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{}, UnprocessedKeys: map[string]types.KeysAndAttributes{}}
	for table, ka := range in.RequestItems {
		done := f.done(len(ka.Keys))
		out.Responses[table] = ka.Keys[:done]
		if done < len(ka.Keys) {
			out.UnprocessedKeys[table] = types.KeysAndAttributes{Keys: ka.Keys[done:], ConsistentRead: ka.ConsistentRead}
		}
	}
	return out, nil
}

func (f *throttling) BatchWriteItem(_ context.Context, in *awsdynamodb.BatchWriteItemInput, _ ...func(*awsdynamodb.Options)) (*awsdynamodb.BatchWriteItemOutput, error) {
	out := &awsdynamodb.BatchWriteItemOutput{UnprocessedItems: map[string][]types.WriteRequest{}}
	for table, reqs := range in.RequestItems {
		if done := f.done(len(reqs)); done < len(reqs) {
			out.UnprocessedItems[table] = reqs[done:]
		}
	}
	return out, nil
}

// done is how many of n items an answer does.
func (f *throttling) done(n int) int {
	f.batches++
	if f.stalls > 0 {
		f.stalls--
		return 0
	}
	if f.perAnswer > 0 {
		return min(n, f.perAnswer)
	}
	return n
}

func (f *throttling) TransactWriteItems(_ context.Context, in *awsdynamodb.TransactWriteItemsInput, _ ...func(*awsdynamodb.Options)) (*awsdynamodb.TransactWriteItemsOutput, error) {
	f.transactions++
	if f.cancels == 0 {
		return &awsdynamodb.TransactWriteItemsOutput{}, nil
	}
	f.cancels--
	reasons := make([]types.CancellationReason, len(in.TransactItems))
	for k := range reasons {
		reasons[k] = types.CancellationReason{Code: aws.String("None")}
	}
	reasons[0] = types.CancellationReason{Code: aws.String("ThrottlingError"), Message: aws.String("Throughput exceeds the current capacity for one or more global secondary indexes.")}
	return nil, &types.TransactionCanceledException{
		Message:             aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [ThrottlingError]"),
		CancellationReasons: reasons,
	}
}

// throttledStore is a store on api whose waits are recorded, not slept.
func throttledStore(t *testing.T, api *throttling) (*Store, *[]time.Duration) {
	t.Helper()
	s, err := New(api, "bullpen-prod", clock.NewVirtual(time.Now()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	s.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		return ctx.Err()
	}
	return s, &waits
}

func keys(n int) []map[string]types.AttributeValue {
	out := make([]map[string]types.AttributeValue, n)
	for k := range out {
		out[k] = instanceKey(fmt.Sprint("bp-", k))
	}
	return out
}

// checkBackoff checks that waits back off exponentially with jitter: each
// between half and all of its step, the steps doubling from throttleBase
// after an answer that did some of the work, and after one that did none
// from twice that, up to throttleCap.
func checkBackoff(t *testing.T, waits []time.Duration, first time.Duration) {
	t.Helper()
	step := first
	for k, d := range waits {
		if d < step/2 || d > step {
			t.Errorf("wait %d of %v: %v, want between %v and %v", k, waits, d, step/2, step)
		}
		step = min(2*step, throttleCap)
	}
}

// A batch DynamoDB keeps throttling is asked for again with waits that
// grow to seconds, and done once DynamoDB does it; for good, it gives up
// after more than ten seconds of waiting, naming the table and as
// throttled.
func TestUnprocessedItemsAreRetriedWithBackoff(t *testing.T) {
	for _, op := range []string{"BatchGetItem", "BatchWriteItem"} {
		run := func(s *Store) error {
			if op == "BatchGetItem" {
				got, err := s.batchGet(t.Context(), keys(3))
				if err == nil && len(got) != 3 {
					t.Errorf("%s: %d rows read, want 3", op, len(got))
				}
				return err
			}
			return s.deleteKeys(t.Context(), keys(3))
		}
		t.Run(op, func(t *testing.T) {
			api := &throttling{stalls: throttleStalls - 1}
			s, waits := throttledStore(t, api)
			if err := run(s); err != nil {
				t.Fatalf("a batch throttled %d times: %v; want it done", throttleStalls-1, err)
			}
			if api.batches != throttleStalls || len(*waits) != throttleStalls-1 {
				t.Fatalf("%d calls and %d waits, want %d and %d", api.batches, len(*waits), throttleStalls, throttleStalls-1)
			}
			checkBackoff(t, *waits, 2*throttleBase)
			if last := (*waits)[len(*waits)-1]; last < time.Second {
				t.Errorf("longest wait %v, want seconds", last)
			}

			api = &throttling{stalls: 1000}
			s, waits = throttledStore(t, api)
			err := run(s)
			var total time.Duration
			for _, d := range *waits {
				total += d
			}
			if !errors.Is(err, awsconf.ErrThrottled) || !strings.Contains(err.Error(), op) || !strings.Contains(err.Error(), "bullpen-prod") {
				t.Fatalf("a batch throttled for good: %v; want ErrThrottled naming %s and the table", err, op)
			}
			if api.batches != throttleStalls || total < 10*time.Second {
				t.Fatalf("gave up after %d calls and %v of waiting, want %d calls and over 10 s", api.batches, total, throttleStalls)
			}
		})
	}
}

// A batch DynamoDB does a little of at a time is carried on to the end,
// however many answers it takes: only answers that do none of it count
// towards giving up.
func TestABatchDoneALittleAtATimeIsDone(t *testing.T) {
	api := &throttling{perAnswer: 1}
	s, waits := throttledStore(t, api)
	got, err := s.batchGet(t.Context(), keys(40))
	if err != nil || len(got) != 40 || api.batches != 40 {
		t.Fatalf("a batch done one key an answer: %d rows in %d calls, %v; want 40 in 40", len(got), api.batches, err)
	}
	for _, d := range *waits {
		if d < throttleBase/2 || d > throttleBase {
			t.Fatalf("waits %v after answers that did some of the batch, want each between %v and %v", *waits, throttleBase/2, throttleBase)
		}
	}
}

// A throttled batch stops waiting when its context ends.
func TestThrottledBatchEndsWithItsContext(t *testing.T) {
	api := &throttling{stalls: 1000}
	s, _ := throttledStore(t, api)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.batchGet(ctx, keys(3)); !errors.Is(err, context.Canceled) || api.batches != 1 {
		t.Fatalf("after %d calls: %v; want context.Canceled after one", api.batches, err)
	}
}

// A transaction cancelled for throughput is sent again with backoff;
// cancelled for good, the error names the table and says throttled.
func TestATransactionCancelledForThroughputIsRetried(t *testing.T) {
	in := domain.Instance{ID: "bp-1", State: domain.StatePending, Runner: "small"}
	api := &throttling{cancels: 3}
	s, waits := throttledStore(t, api)
	if err := s.CreateInstances(t.Context(), []domain.Instance{in}); err != nil {
		t.Fatalf("create throttled three times: %v; want it done", err)
	}
	if api.transactions != 4 || len(*waits) != 3 {
		t.Fatalf("%d transactions and %d waits, want 4 and 3", api.transactions, len(*waits))
	}
	checkBackoff(t, *waits, 2*throttleBase)

	api = &throttling{cancels: 1000}
	s, _ = throttledStore(t, api)
	err := s.CreateInstances(t.Context(), []domain.Instance{in})
	if !errors.Is(err, awsconf.ErrThrottled) || !strings.Contains(err.Error(), "TransactWriteItems on bullpen-prod") || errors.Is(err, domain.ErrExists) {
		t.Fatalf("create throttled for good: %v; want ErrThrottled naming TransactWriteItems and the table", err)
	}
	if api.transactions != throttleStalls {
		t.Fatalf("%d transactions, want %d", api.transactions, throttleStalls)
	}
}

func TestDescribeATransactionCancelledForThroughput(t *testing.T) {
	err := describe("TransactWriteItems", "bullpen-prod", &types.TransactionCanceledException{
		Message:             aws.String("Transaction cancelled [ThrottlingError, None]"),
		CancellationReasons: []types.CancellationReason{{Code: aws.String("ThrottlingError")}, {Code: aws.String("None")}},
	})
	if !errors.Is(err, awsconf.ErrThrottled) || !strings.Contains(err.Error(), "bullpen-prod") || cancelled(err) == nil {
		t.Fatalf("got %v; want ErrThrottled naming the table, its reasons kept", err)
	}
	refused := &types.TransactionCanceledException{CancellationReasons: []types.CancellationReason{{Code: aws.String("ThrottlingError")}, {Code: aws.String("ConditionalCheckFailed")}}}
	if errors.Is(describe("TransactWriteItems", "t", refused), awsconf.ErrThrottled) {
		t.Fatal("a transaction whose condition failed is described as throttled")
	}
}
