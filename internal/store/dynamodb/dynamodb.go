// Package dynamodb is bullpen's state on Amazon DynamoDB, for several
// replicas of `bullpen serve` sharing one store. It implements every port
// of domain.Store and runs the same contract suite as the embedded SQLite
// store.
//
// One table holds every row, keyed by pk and sk: an instance is
// "inst#ID", a job "job#ID", a lease "lease#NAME", and the pool statuses
// share the partition "pools". Every change of a row is a write
// conditioned on the version read, so two replicas deciding from the same
// row cannot both win; a change that spans rows (a job and its instance)
// is one TransactWriteItems. Look-ups by anything but the id go through
// global secondary indexes (see table.go), so no loop scans the table.
// Index reads are eventually consistent: a change is decided on a row read
// by id (now, or a moment ago by this store), written a moment ago by this
// store (see recentRows), or returned by a refused write, never on one
// found through an index, so a stale index entry costs a refused guard,
// never a wrong write.
package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// API is the part of the DynamoDB client the store calls. The IAM policy
// bullpen prints allows exactly these operations.
type API interface {
	GetItem(context.Context, *awsdynamodb.GetItemInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.GetItemOutput, error)
	PutItem(context.Context, *awsdynamodb.PutItemInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *awsdynamodb.UpdateItemInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.UpdateItemOutput, error)
	DeleteItem(context.Context, *awsdynamodb.DeleteItemInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.DeleteItemOutput, error)
	Query(context.Context, *awsdynamodb.QueryInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.QueryOutput, error)
	BatchGetItem(context.Context, *awsdynamodb.BatchGetItemInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.BatchGetItemOutput, error)
	BatchWriteItem(context.Context, *awsdynamodb.BatchWriteItemInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.BatchWriteItemOutput, error)
	TransactWriteItems(context.Context, *awsdynamodb.TransactWriteItemsInput, ...func(*awsdynamodb.Options)) (*awsdynamodb.TransactWriteItemsOutput, error)
}

// Options tune a Store; zero values take the defaults.
type Options struct {
	// HeartbeatResolution: a heartbeat is written only once it is this much
	// newer than the last one this store wrote or read for the instance,
	// so an idle instance costs one write per resolution, not one per beat.
	// Readers see heartbeats up to this old. 0 writes every heartbeat.
	HeartbeatResolution time.Duration
	// Retention is how long terminated instances and final jobs are kept
	// before DynamoDB's time to live removes them, should bullpen's own
	// clean-up miss them; default 30 days.
	Retention time.Duration
	// Parallel bounds the concurrent writes of one batch; default 16.
	Parallel int
	// Recent is how long a row this store read by id (GetItem) or wrote in
	// a transition is decided on again without another read (see
	// recentRows); default 2 s. Negative decides every change on a row
	// read for it (or returned by a refused write).
	Recent time.Duration
	// Refused, when set, is told of each conditional write refused
	// because a row was no longer the one decided on, changed since by
	// this store or another: row is "instance" or "job" for a transition
	// (remembered: the row decided on was a remembered one) and
	// "transaction" for a Commit. The change is decided again, unless
	// that was its last attempt.
	Refused func(row string, remembered bool)
	// Log hears Open's warnings about the table; nil: slog.Default().
	Log *slog.Logger
}

// Store is domain.Store on one DynamoDB table.
type Store struct {
	api    API
	table  string
	clk    domain.Clock
	opts   Options
	closed atomic.Bool

	// beats remembers, per instance, the newest heartbeat written, for
	// HeartbeatResolution.
	beats  sync.Map
	recent *recentRows
	// sleep waits out throttling (see throttled); tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
}

var _ domain.Store = (*Store)(nil)

// New returns the store on table through api. The table must exist: Ensure
// creates it.
func New(api API, table string, clk domain.Clock, opts Options) (*Store, error) {
	if table == "" {
		return nil, errors.New("dynamodb store: no table name")
	}
	if opts.Retention <= 0 {
		opts.Retention = 30 * 24 * time.Hour
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 16
	}
	if opts.Recent == 0 {
		opts.Recent = 2 * time.Second
	}
	return &Store{api: api, table: table, clk: clk, opts: opts, recent: newRecentRows(opts.Recent), sleep: sleep}, nil
}

// Open checks that table exists, is ready and has bullpen's keys and
// indexes, so a missing or unsuitable table is reported when bullpen
// starts rather than at its first job; a time to live that is off is
// logged as a warning.
func Open(ctx context.Context, client *awsdynamodb.Client, table string, clk domain.Clock, opts Options) (*Store, error) {
	s, err := New(client, table, clk, opts)
	if err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	if err := check(ctx, client, table, log); err != nil {
		return nil, err
	}
	return s, nil
}

// Close marks the store closed; calls after it fail. The client holds no
// connection that needs closing.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

var errClosed = errors.New("store is closed")

// RefusedRows are the rows Options.Refused may name: one row's transition,
// or a Commit's transaction.
var RefusedRows = []string{instanceKind.noun, jobKind.noun, rowTransaction}

const rowTransaction = "transaction"

// refused tells Options.Refused of a refused conditional write.
func (s *Store) refused(row string, remembered bool) {
	if s.opts.Refused != nil {
		s.opts.Refused(row, remembered)
	}
}

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// now is the store's clock in UTC, the zone every stored time is in.
func (s *Store) now() time.Time { return s.clk.Now().UTC() }

// tbl is the table name as the SDK wants it.
func (s *Store) tbl() *string { return aws.String(s.table) }

// parallel runs fn(k) for k in [0,n) with at most s.opts.Parallel at once.
func (s *Store) parallel(n int, fn func(k int)) {
	sem := make(chan struct{}, s.opts.Parallel)
	var wg sync.WaitGroup
	for k := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(k)
		}()
	}
	wg.Wait()
}

// maxAttempts bounds the re-reads of a row whose version moved between the
// read and the conditional write: each attempt decides afresh from the row
// as it is, so a loser usually stops at once on a guard that no longer
// matches.
const maxAttempts = 20

// backoff waits a little before attempt (from 1), so that writers racing
// for one row do not collide again at once.
func backoff(ctx context.Context, attempt int) error {
	if attempt < 2 {
		return nil
	}
	return sleep(ctx, time.Duration(attempt)*time.Millisecond)
}

// errContended: a row kept changing under every attempt.
var errContended = fmt.Errorf("the row kept changing: gave up after %d attempts", maxAttempts)
