package dashboard

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

const (
	// snapshotQueries is what one snapshot costs: instances, active jobs,
	// recent jobs, pool statuses.
	snapshotQueries = 4
	// recentJobs is how many of the newest jobs a snapshot holds, for the
	// recent and rejected lists and the queue-time charts.
	recentJobs = 2000
)

// activeStatuses are the jobs still waiting for, or holding, a runner.
var activeStatuses = []domain.JobStatus{domain.JobQueued, domain.JobAssigned, domain.JobRunning}

// snapshot is what every page is drawn from.
type snapshot struct {
	at  time.Time
	gen uint64 // increases when the content changes
	fp  uint64 // fingerprint of the content

	instances []domain.Instance // every row, terminated ones included
	byID      map[string]int    // index into instances
	active    []domain.Job      // queued, assigned, running; oldest first
	recent    []domain.Job      // the newest recentJobs jobs, newest first
	statuses  map[string]domain.PoolStatus
	jobs      map[int64]int // index into recent
}

func (s *snapshot) instance(id string) (domain.Instance, bool) {
	if k, ok := s.byID[id]; ok {
		return s.instances[k], true
	}
	return domain.Instance{}, false
}

// job finds a job among the active and recent ones.
func (s *snapshot) job(id int64) (domain.Job, bool) {
	for _, j := range s.active {
		if j.ID == id {
			return j, true
		}
	}
	if k, ok := s.jobs[id]; ok {
		return s.recent[k], true
	}
	return domain.Job{}, false
}

// cache holds the current snapshot and reads a new one at most once per
// interval, whoever asks: pages, the event hub, the metrics, the sampler.
// The read runs on its own, shared by every caller: no caller waits on the
// store longer than it chooses to, nor on another caller's read.
type cache struct {
	store Store
	clock domain.Clock
	every time.Duration
	log   *slog.Logger

	cur     atomic.Pointer[snapshot]
	mu      sync.Mutex // guards failed, failure, reading; never held over a read
	failed  time.Time
	failure *errStale
	// reading is closed when the read of the store in progress ends; nil
	// while none is.
	reading chan struct{}
	// stale is the failure in force, readable without taking mu; nil while
	// the store answers.
	stale   atomic.Pointer[errStale]
	queries atomic.Int64
	history history
}

func newCache(st Store, clk domain.Clock, every time.Duration, log *slog.Logger) *cache {
	return &cache{store: st, clock: clk, every: every, log: log}
}

// errStale says the store did not answer; the snapshot returned with it,
// if any, is the last one read. since is the first failure of the run of
// failures, which stays the same while the store keeps failing.
type errStale struct {
	err   error
	since time.Time
}

func (e *errStale) Error() string { return "store unavailable: " + e.err.Error() }
func (e *errStale) Unwrap() error { return e.err }

// snapshotTimeout bounds one read of the store for a snapshot. The read is
// shared, so it runs to this bound whoever started it: a caller who stops
// waiting leaves it to the next.
const snapshotTimeout = 10 * time.Second

// get returns a snapshot no older than the interval, waiting for a read of
// the store if the current one is older, until ctx ends: then it returns
// the snapshot in hand, however old, and the read goes on. When the store
// fails it returns the last snapshot (nil if none) with an *errStale, and
// does not try again before the interval has passed.
func (c *cache) get(ctx context.Context) (*snapshot, error) {
	reading, s, err := c.refresh()
	if reading == nil {
		return s, err
	}
	select {
	case <-reading:
	case <-ctx.Done():
	}
	return c.current()
}

// refresh returns the snapshot when it is fresh, or the failure in force
// when the store failed within the interval. Otherwise it starts a read of
// the store, unless one is in progress, and returns the channel closed
// when that read ends.
func (c *cache) refresh() (reading <-chan struct{}, s *snapshot, err error) {
	if s := c.cur.Load(); s != nil && c.clock.Now().Sub(s.at) < c.every {
		return nil, s, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	s = c.cur.Load()
	switch {
	case s != nil && now.Sub(s.at) < c.every:
		return nil, s, nil
	case c.failure != nil && now.Sub(c.failed) < c.every:
		return nil, s, c.failure
	case c.reading == nil:
		c.reading = make(chan struct{})
		go c.readShared(now, c.reading)
	}
	return c.reading, nil, nil
}

// readShared reads a snapshot for every caller and closes done. Its
// context is its own: one viewer who disconnects, or one scrape that stops
// waiting, must not make it a store failure shown to all the others.
func (c *cache) readShared(now time.Time, done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), snapshotTimeout)
	next, err := c.read(ctx, now)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(done)
	c.reading = nil
	if err != nil {
		since := now
		if c.failure != nil {
			since = c.failure.since
		}
		c.failed, c.failure = now, &errStale{err: err, since: since}
		c.stale.Store(c.failure)
		c.log.Warn("dashboard: read the store", "err", err)
		return
	}
	c.failure = nil
	c.stale.Store(nil)
	next.gen = 1
	if s := c.cur.Load(); s != nil {
		next.gen = s.gen
		if next.fp != s.fp {
			next.gen++
		}
	}
	c.cur.Store(next)
	c.history.add(now, next.instances)
}

// current returns the snapshot in hand and the failure in force, if any,
// without reading the store.
func (c *cache) current() (*snapshot, error) {
	s := c.cur.Load()
	if f := c.stale.Load(); f != nil {
		return s, f
	}
	return s, nil
}

// read makes the snapshotQueries queries of one snapshot.
func (c *cache) read(ctx context.Context, now time.Time) (*snapshot, error) {
	s := &snapshot{at: now, byID: map[string]int{}, statuses: map[string]domain.PoolStatus{}, jobs: map[int64]int{}}
	var err error
	c.queries.Add(1)
	if s.instances, err = c.store.ListInstances(ctx, domain.InstanceFilter{}); err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	c.queries.Add(1)
	if s.active, err = c.store.ListJobs(ctx, domain.JobFilter{Statuses: activeStatuses}); err != nil {
		return nil, fmt.Errorf("list active jobs: %w", err)
	}
	c.queries.Add(1)
	if s.recent, err = c.store.ListJobs(ctx, domain.JobFilter{Newest: true, Limit: recentJobs}); err != nil {
		return nil, fmt.Errorf("list recent jobs: %w", err)
	}
	c.queries.Add(1)
	statuses, err := c.store.ListPoolStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pool statuses: %w", err)
	}
	for _, st := range statuses {
		s.statuses[st.Name] = st
	}
	for k := range s.instances {
		// Credentials never reach a page, even by mistake.
		in := &s.instances[k]
		in.RunnerConfig, in.BootstrapHash, in.AgentTokenHash = "", "", ""
		s.byID[in.ID] = k
	}
	for k, j := range s.recent {
		s.jobs[j.ID] = k
	}
	s.fp = fingerprint(s)
	return s, nil
}

// fingerprint changes when anything a page shows changes: a row's
// version, a converger cycle. Heartbeats are left out: every instance sends
// one every few seconds, so with them every open page would be replaced at
// every tick; the ages a page shows tick in the browser.
func fingerprint(s *snapshot) uint64 {
	h := fnv.New64a()
	var b [8]byte
	num := func(v int64) {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		h.Write(b[:])
	}
	for _, in := range s.instances {
		h.Write([]byte(in.ID))
		num(in.Version)
	}
	for _, list := range [][]domain.Job{s.active, s.recent} {
		for _, j := range list {
			num(j.ID)
			num(j.Version)
		}
	}
	for _, st := range sortedStatuses(s.statuses) {
		h.Write([]byte(st.Name))
		num(st.LastCycle.UnixNano())
	}
	return h.Sum64()
}

// history keeps instances by state, one sample a minute, for the last
// historySpan.
type history struct {
	mu      sync.Mutex
	samples []sample
}

const historySpan = 6 * time.Hour

type sample struct {
	at     time.Time // the minute it stands for
	counts map[domain.State]int
}

func (h *history) add(at time.Time, insts []domain.Instance) {
	counts := map[domain.State]int{}
	for _, in := range insts {
		counts[in.State]++
	}
	minute := at.Truncate(time.Minute)
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.samples); n > 0 && h.samples[n-1].at.Equal(minute) {
		h.samples[n-1].counts = counts
		return
	}
	h.samples = append(h.samples, sample{at: minute, counts: counts})
	cut := 0
	for cut < len(h.samples) && !h.samples[cut].at.After(minute.Add(-historySpan)) {
		cut++
	}
	h.samples = append(h.samples[:0:0], h.samples[cut:]...)
}

func (h *history) list() []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sample(nil), h.samples...)
}
