package dynamodb_test

import (
	"context"
	"errors"
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
	refused                  int // updates refused on their condition
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
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gets++
	if err == nil {
		m.rows++
		m.units += math.Ceil(float64(max(itemSize(out.Item), 1)) / 4096)
	}
	return out, err
}

func (m *readMeter) UpdateItem(ctx context.Context, in *awsdynamodb.UpdateItemInput, opts ...func(*awsdynamodb.Options)) (*awsdynamodb.UpdateItemOutput, error) {
	out, err := m.API.UpdateItem(ctx, in, opts...)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		m.mu.Lock()
		m.refused++
		m.mu.Unlock()
	}
	return out, err
}

// getCalls is the GetItem calls made so far.
func (m *readMeter) getCalls() int { g, _ := m.getsAndRefused(); return g }

// getsAndRefused are the GetItem calls made and the updates refused so far.
func (m *readMeter) getsAndRefused() (gets, refused int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gets, m.refused
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
	m.queries, m.gets, m.batchGets, m.rows, m.units, m.refused = 0, 0, 0, 0, 0, 0
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

// fixtureJob is a job as a webhook records it, its row about the size of
// a real one.
func fixtureJob(id int64, status domain.JobStatus, pool string) domain.Job {
	return domain.Job{
		ID: id, RunID: 8_000_000_000 + id, RunAttempt: 1, Repo: "acme/widgets", Name: fmt.Sprintf("build (linux, %d)", id),
		Workflow: "ci.yml", Labels: []string{"self-hosted", "linux", "x64", "pool=" + pool},
		Status: status, Route: domain.RoutePool, Pool: pool, Runner: "small",
		Spec: domain.RunnerSpec{Name: "small", Image: "ubuntu-24.04", CPU: domain.Range{Min: 2, Max: 4}, RAM: domain.Range{Min: 4, Max: 8}},
	}
}

// createJobs creates the jobs, count of them from id first on, each
// batch of four sharing a creation time, a second after the batch before.
func (s *meteredStore) createJobs(t *testing.T, first int64, count int, status domain.JobStatus, pool func(int64) string) {
	t.Helper()
	var jobs []domain.Job
	for id := first; id < first+int64(count); id++ {
		jobs = append(jobs, fixtureJob(id, status, pool(id)))
	}
	for _, batch := range domain.Chunk(jobs, 4) {
		if _, err := s.CreateJobs(t.Context(), batch); err != nil {
			t.Fatal(err)
		}
		s.clk.Advance(time.Second)
	}
}

func jobIDsOf(jobs []domain.Job) []int64 {
	out := make([]int64, len(jobs))
	for k, j := range jobs {
		out[k] = j.ID
	}
	return out
}

func (s *meteredStore) listJobs(t *testing.T, f domain.JobFilter) []domain.Job {
	t.Helper()
	list, err := s.ListJobs(t.Context(), f)
	if err != nil {
		t.Fatalf("list jobs %+v: %v", f, err)
	}
	return list
}

func twoPools(id int64) string { return []string{"linux", "arm"}[id%2] }

// A listing with a limit reads its index in the order asked for and stops
// once it has the jobs it returns, which are the ones a read of every row
// gives, cut to the limit: the dashboard's recent jobs, the reaper's
// scopes and the API's listing each read their page of jobs, not every
// job kept.
func TestAListingWithALimitReadsOnlyTheJobsItReturns(t *testing.T) {
	s := metered(t)
	s.createJobs(t, 1, 200, domain.JobCompleted, twoPools)
	s.createJobs(t, 201, 6, domain.JobQueued, twoPools)
	s.createJobs(t, 207, 6, domain.JobRunning, twoPools)
	s.createJobs(t, 213, 200, domain.JobCompleted, twoPools)
	statuses := []domain.JobStatus{domain.JobQueued, domain.JobRunning}
	cases := []limitedListing[domain.JobFilter]{
		{"newest", domain.JobFilter{Newest: true, Limit: 10}, 10},
		{"oldest", domain.JobFilter{Limit: 10}, 10},
		{"newest of two statuses", domain.JobFilter{Statuses: statuses, Newest: true, Limit: 4}, 8},
		{"oldest of two statuses", domain.JobFilter{Statuses: statuses, Limit: 4}, 8},
		{"newest of a pool", domain.JobFilter{Pool: "arm", Newest: true, Limit: 10}, 10},
		{"a pool's live jobs", domain.JobFilter{Pool: "arm", Statuses: statuses, Newest: true, Limit: 3}, 0},
		{"a pool's finished jobs", domain.JobFilter{Pool: "arm", Statuses: []domain.JobStatus{domain.JobCompleted}, Limit: 7}, 0},
		{"fewer than the limit", domain.JobFilter{Statuses: []domain.JobStatus{domain.JobRunning}, Newest: true, Limit: 50}, 6},
	}
	checkLimitedListings(t, s, "jobs", cases, func(f *domain.JobFilter) *int { return &f.Limit },
		func(t *testing.T, f domain.JobFilter) []int64 { return jobIDsOf(s.listJobs(t, f)) })
}

// limitedListing is a listing with a limit, and the most rows it may read.
type limitedListing[F any] struct {
	name    string
	f       F
	maxRows int // 0: the rows it skips are not bounded here
}

// checkLimitedListings runs each case as a subtest: its listing must be
// the first rows of the same listing without a limit, and read at most
// maxRows rows. list lists the ids a filter selects; limit is where the
// filter keeps its limit.
func checkLimitedListings[F any, ID comparable](t *testing.T, s *meteredStore, noun string, cases []limitedListing[F],
	limit func(*F) *int, list func(*testing.T, F) []ID) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			every := c.f
			*limit(&every) = 0
			want := list(t, every)
			want = want[:min(*limit(&c.f), len(want))]
			s.m.reset()
			got := list(t, c.f)
			if !slices.Equal(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
			t.Logf("%d queries, %d rows read, %.1f read units", s.m.queries, s.m.rows, s.m.units)
			if c.maxRows > 0 && s.m.rows > c.maxRows {
				t.Errorf("%d rows read for %d %s listed; want at most %d", s.m.rows, len(got), noun, c.maxRows)
			}
		})
	}
}

// An autoscaler's demand, a pool's live jobs, reads the live statuses'
// partitions, not the pool's every finished job.
func TestAPoolsLiveJobsAreReadWithoutItsHistory(t *testing.T) {
	s := metered(t)
	s.createJobs(t, 1, 300, domain.JobCompleted, func(int64) string { return "linux" })
	s.createJobs(t, 301, 3, domain.JobQueued, func(int64) string { return "linux" })
	s.createJobs(t, 304, 2, domain.JobRunning, twoPools)
	s.createJobs(t, 306, 1, domain.JobAssigned, func(int64) string { return "arm" })
	s.m.reset()
	live := []domain.JobStatus{domain.JobQueued, domain.JobAssigned, domain.JobRunning}
	got := jobIDsOf(s.listJobs(t, domain.JobFilter{Pool: "linux", Statuses: live}))
	if want := []int64{301, 302, 303, 304}; !slices.Equal(got, want) {
		t.Fatalf("the pool's live jobs: %v, want %v", got, want)
	}
	t.Logf("%d queries, %d rows read, %.1f read units", s.m.queries, s.m.rows, s.m.units)
	if s.m.rows > 6 {
		t.Errorf("%d rows read for the pool's live jobs; want at most the 6 live jobs", s.m.rows)
	}
}

// The clean-up of finished jobs reads the jobs created before the cut-off
// only, not every finished job kept. A job created before it and finished
// after it is kept until the cut-off passes its finish; one whose finish
// a clock running behind stamped before its creation goes once the
// cut-off passes its creation.
func TestDeletingOldJobsReadsOnlyTheOldOnes(t *testing.T) {
	s := metered(t)
	t0 := s.clk.Now()
	s.createJobs(t, 1, 3, domain.JobCompleted, twoPools) // at t0
	s.createJobs(t, 4, 1, domain.JobQueued, twoPools)    // finished late, below
	s.createJobs(t, 5, 1, domain.JobRejected, twoPools)
	s.clk.Advance(time.Hour)
	s.createJobs(t, 100, 200, domain.JobCompleted, twoPools)
	// Job 99 is created on a clock an hour ahead and finished on this one.
	ahead, err := dynamodb.New(s.m.API, s.table, clock.NewVirtual(s.clk.Now().Add(time.Hour)), dynamodb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ahead.CreateJobs(t.Context(), []domain.Job{fixtureJob(99, domain.JobQueued, "linux")}); err != nil {
		t.Fatal(err)
	}
	finish := func(id int64) {
		if _, err := s.TransitionJob(t.Context(), id, domain.JobGuard{Status: domain.JobQueued}, func(j *domain.Job) {
			j.Status = domain.JobCompleted
		}); err != nil {
			t.Fatal(err)
		}
	}
	finish(99)
	s.clk.Advance(time.Hour)
	finish(4) // two hours after its creation
	steps := []struct {
		before  time.Time
		deleted int
		maxRows int
		gone    []int64
	}{
		{t0.Add(time.Minute), 4, 5, []int64{1, 2, 3, 5}},        // job 4 finished after the cut-off
		{t0.Add(90 * time.Minute), 200, 201, []int64{100, 299}}, // 99 finished before it, created after it
		{t0.Add(3 * time.Hour), 2, 2, []int64{4, 99}},           // the cut-off passed 4's finish and 99's creation
		{t0.Add(3 * time.Hour), 0, 0, nil},                      // nothing left to read
	}
	for k, st := range steps {
		s.m.reset()
		n, err := s.DeleteJobs(t.Context(), st.before)
		if err != nil || n != st.deleted {
			t.Fatalf("step %d: deleted %d (%v), want %d", k, n, err, st.deleted)
		}
		t.Logf("step %d: %d queries, %d rows read, %.1f read units", k, s.m.queries, s.m.rows, s.m.units)
		if s.m.rows > st.maxRows {
			t.Errorf("step %d: %d rows read to delete %d; want at most %d", k, s.m.rows, n, st.maxRows)
		}
		for _, id := range st.gone {
			if _, err := s.GetJob(t.Context(), id); err == nil {
				t.Errorf("step %d: job %d is still there", k, id)
			}
		}
	}
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

// createInstancesOverTime records n instances, bp-000 on, of pool(k),
// four a second, terminated but for the ten from the ready-th on.
func (s *meteredStore) createInstancesOverTime(t *testing.T, n, ready int, pool func(k int) string) {
	t.Helper()
	var insts []domain.Instance
	for k := range n {
		in := domain.Instance{ID: fmt.Sprintf("bp-%03d", k), Pool: pool(k), Runner: "small", Role: domain.RoleHot, State: domain.StateTerminated}
		if k >= ready && k < ready+10 {
			in.State = domain.StateReady
		}
		insts = append(insts, in)
	}
	for _, batch := range domain.Chunk(insts, 4) {
		if err := s.CreateInstances(t.Context(), batch); err != nil {
			t.Fatal(err)
		}
		s.clk.Advance(time.Second)
	}
}

// A listing of instances with a limit reads its index in the order asked
// for and stops once it has the instances it returns, which are the ones a
// read of every row gives, cut to the limit: the API's page of instances
// reads that page, not every terminated row kept.
func TestAnInstanceListingWithALimitReadsOnlyTheInstancesItReturns(t *testing.T) {
	s := metered(t)
	s.createInstancesOverTime(t, 300, 150, func(k int) string { return []string{"linux", "arm"}[k%2] })
	live := []domain.State{domain.StateReady, domain.StateBooting}
	cases := []limitedListing[domain.InstanceFilter]{
		{"newest", domain.InstanceFilter{Newest: true, Limit: 10}, 10},
		{"oldest", domain.InstanceFilter{Limit: 10}, 10},
		{"newest of two states", domain.InstanceFilter{States: live, Newest: true, Limit: 4}, 8},
		{"newest of a pool", domain.InstanceFilter{Pool: "arm", Newest: true, Limit: 10}, 10},
		{"a pool's live ones", domain.InstanceFilter{Pool: "arm", States: live, Newest: true, Limit: 3}, 10},
		{"fewer than the limit", domain.InstanceFilter{States: live, Limit: 50}, 10},
	}
	checkLimitedListings(t, s, "instances", cases, func(f *domain.InstanceFilter) *int { return &f.Limit },
		func(t *testing.T, f domain.InstanceFilter) []string {
			insts, err := s.ListInstances(t.Context(), f)
			if err != nil {
				t.Fatal(err)
			}
			return instanceIDsOf(insts)
		})
}

func instanceIDsOf(insts []domain.Instance) []string {
	out := make([]string, len(insts))
	for k, in := range insts {
		out[k] = in.ID
	}
	return out
}

// pagedListing is a page after a position, and the most rows it may read.
type pagedListing[F any] struct {
	name    string
	f       F
	maxRows int
}

// A page after a position reads its index from the position on, in the
// order asked for: the API's hundredth page of jobs reads that page, not
// the ninety-nine before it. Each page is the rows of the whole listing
// that follow the position, cut to the limit.
func TestAPageAfterAPositionReadsOnlyThatPage(t *testing.T) {
	s := metered(t)
	s.createJobs(t, 1, 200, domain.JobCompleted, twoPools)
	s.createJobs(t, 201, 6, domain.JobQueued, twoPools)
	s.createJobs(t, 207, 6, domain.JobRunning, twoPools)
	s.createJobs(t, 213, 200, domain.JobCompleted, twoPools)
	at := func(id int64) *domain.ListPosition[int64] {
		j, err := s.GetJob(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return &domain.ListPosition[int64]{CreatedAt: j.CreatedAt, ID: j.ID}
	}
	statuses := []domain.JobStatus{domain.JobQueued, domain.JobRunning}
	cases := []pagedListing[domain.JobFilter]{
		{"newest", domain.JobFilter{Newest: true, Limit: 10, After: at(301)}, 10},
		{"oldest", domain.JobFilter{Limit: 10, After: at(102)}, 10},
		{"newest of two statuses", domain.JobFilter{Statuses: statuses, Newest: true, Limit: 4, After: at(209)}, 8},
		{"oldest of two statuses", domain.JobFilter{Statuses: statuses, Limit: 4, After: at(203)}, 8},
		{"newest of a pool", domain.JobFilter{Pool: "arm", Newest: true, Limit: 10, After: at(300)}, 10},
		{"the last page", domain.JobFilter{Limit: 10, After: at(407)}, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			every := c.f
			every.Limit, every.After = 0, nil
			var want []int64
			for _, j := range s.listJobs(t, every) {
				if c.f.After.Passed(j.CreatedAt, j.ID, c.f.Newest) && len(want) < c.f.Limit {
					want = append(want, j.ID)
				}
			}
			s.m.reset()
			got := jobIDsOf(s.listJobs(t, c.f))
			if !slices.Equal(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
			t.Logf("%d queries, %d rows read, %.1f read units", s.m.queries, s.m.rows, s.m.units)
			if s.m.rows > c.maxRows {
				t.Errorf("%d rows read for %d jobs listed; want at most %d", s.m.rows, len(got), c.maxRows)
			}
		})
	}
}

// A page of instances after a position reads its index from the position
// on, as a page of jobs does: the API's later pages of instances, the
// terminated ones included, read those pages only.
func TestAnInstancePageAfterAPositionReadsOnlyThatPage(t *testing.T) {
	s := metered(t)
	s.createInstancesOverTime(t, 200, 100, func(int) string { return "" })
	at := func(id string) *domain.ListPosition[string] {
		in, err := s.GetInstance(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return &domain.ListPosition[string]{CreatedAt: in.CreatedAt, ID: in.ID}
	}
	live := []domain.State{domain.StateReady, domain.StateBooting}
	cases := []pagedListing[domain.InstanceFilter]{
		{"newest", domain.InstanceFilter{Newest: true, Limit: 10, After: at("bp-150")}, 10},
		{"oldest", domain.InstanceFilter{Limit: 10, After: at("bp-049")}, 10},
		{"newest of two states", domain.InstanceFilter{States: live, Newest: true, Limit: 3, After: at("bp-105")}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			every := c.f
			every.Limit, every.After = 0, nil
			all, err := s.ListInstances(t.Context(), every)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, in := range all {
				if c.f.After.Passed(in.CreatedAt, in.ID, c.f.Newest) && len(want) < c.f.Limit {
					want = append(want, in.ID)
				}
			}
			s.m.reset()
			page, err := s.ListInstances(t.Context(), c.f)
			if err != nil {
				t.Fatal(err)
			}
			if got := instanceIDsOf(page); !slices.Equal(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
			t.Logf("%d queries, %d rows read, %.1f read units", s.m.queries, s.m.rows, s.m.units)
			if s.m.rows > c.maxRows {
				t.Errorf("%d rows read for %d instances listed; want at most %d", s.m.rows, len(page), c.maxRows)
			}
		})
	}
}
