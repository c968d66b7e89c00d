package dynamodb_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/dynamodb"
)

// readMeter counts what a store reads through its client: the calls, the
// rows they return, and the read units DynamoDB bills for them (a query's
// rows together rounded up to 4 KB, half a unit each as index reads are
// eventually consistent; a consistent read of one row a unit per 4 KB).
type readMeter struct {
	dynamodb.API
	mu                       sync.Mutex
	queries, gets, batchGets int
	rows                     int
	units                    float64
	// holdBack is how many keys the next BatchGetItem leaves unprocessed,
	// as DynamoDB does when it is short of capacity.
	holdBack int
}

func (m *readMeter) Query(ctx context.Context, in *awsdynamodb.QueryInput, opts ...func(*awsdynamodb.Options)) (*awsdynamodb.QueryOutput, error) {
	out, err := m.API.Query(ctx, in, opts...)
	if err == nil {
		size := 0
		for _, item := range out.Items {
			size += itemSize(item)
		}
		m.mu.Lock()
		m.queries++
		m.rows += len(out.Items)
		m.units += math.Ceil(float64(max(size, 1))/4096) / 2
		m.mu.Unlock()
	}
	return out, err
}

func (m *readMeter) GetItem(ctx context.Context, in *awsdynamodb.GetItemInput, opts ...func(*awsdynamodb.Options)) (*awsdynamodb.GetItemOutput, error) {
	out, err := m.API.GetItem(ctx, in, opts...)
	if err == nil {
		m.mu.Lock()
		m.gets++
		m.rows++
		m.units += math.Ceil(float64(max(itemSize(out.Item), 1)) / 4096)
		m.mu.Unlock()
	}
	return out, err
}

func (m *readMeter) BatchGetItem(ctx context.Context, in *awsdynamodb.BatchGetItemInput, opts ...func(*awsdynamodb.Options)) (*awsdynamodb.BatchGetItemOutput, error) {
	m.mu.Lock()
	hold := m.holdBack
	m.holdBack = 0
	m.mu.Unlock()
	sent := &awsdynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{}}
	held := map[string]types.KeysAndAttributes{}
	for table, ka := range in.RequestItems {
		n := max(len(ka.Keys)-hold, 1)
		sent.RequestItems[table] = types.KeysAndAttributes{Keys: ka.Keys[:n], ConsistentRead: ka.ConsistentRead}
		if n < len(ka.Keys) {
			held[table] = types.KeysAndAttributes{Keys: ka.Keys[n:], ConsistentRead: ka.ConsistentRead}
		}
	}
	out, err := m.API.BatchGetItem(ctx, sent, opts...)
	if err != nil {
		return out, err
	}
	for table, ka := range held {
		out.UnprocessedKeys[table] = types.KeysAndAttributes{
			Keys: append(slices.Clone(out.UnprocessedKeys[table].Keys), ka.Keys...), ConsistentRead: ka.ConsistentRead}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batchGets++
	for _, items := range out.Responses {
		for _, item := range items {
			m.rows++
			m.units += math.Ceil(float64(itemSize(item)) / 4096)
		}
	}
	return out, nil
}

// reset starts the count again.
func (m *readMeter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queries, m.gets, m.batchGets, m.rows, m.units = 0, 0, 0, 0, 0
}

// itemSize is an item's size as DynamoDB bills it: each attribute's name
// and value, a number about one byte per two digits.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberN:
			n += len(v.Value)/2 + 1
		default:
			n += 8
		}
	}
	return n
}

// meteredStore is a store on a table of its own whose reads m counts.
type meteredStore struct {
	*dynamodb.Store
	m     *readMeter
	clk   *clock.Virtual
	table string
}

func metered(t *testing.T) *meteredStore {
	t.Helper()
	client, table := newTable(t)
	m := &readMeter{API: client}
	clk := clock.NewVirtual(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	s, err := dynamodb.New(m, table, clk, dynamodb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &meteredStore{Store: s, m: m, clk: clk, table: table}
}

// Deleting terminated instances reads them a hundred to a call, asking
// again for the rows DynamoDB left unprocessed, not one call per row.
func TestDeletingInstancesReadsThemInBatches(t *testing.T) {
	s := metered(t)
	var ids []string
	var insts []domain.Instance
	for k := range 250 {
		id := fmt.Sprintf("bp-%03d", k)
		ids = append(ids, id)
		insts = append(insts, domain.Instance{ID: id, State: domain.StateTerminated, Runner: "small"})
	}
	if err := s.CreateInstances(t.Context(), insts); err != nil {
		t.Fatal(err)
	}
	s.m.reset()
	s.m.holdBack = 5
	if err := s.DeleteInstances(t.Context(), append(ids, "bp-never-created")); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d GetItem, %d BatchGetItem, %d rows read, %.1f read units", s.m.gets, s.m.batchGets, s.m.rows, s.m.units)
	// 251 keys: 100 (5 left unprocessed), those 5 again, 100, 51.
	if s.m.gets != 0 || s.m.batchGets != 4 {
		t.Errorf("%d GetItem and %d BatchGetItem to read 251 rows; want 4 BatchGetItem", s.m.gets, s.m.batchGets)
	}
	left, err := s.ListInstances(t.Context(), domain.InstanceFilter{})
	if err != nil || len(left) != 0 {
		t.Fatalf("%d instances left (%v); want none", len(left), err)
	}
}
