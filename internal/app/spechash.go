package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// specHashRefresh is how often a replica reads the recorded spec hashes:
// how long, at most, after a roll begins on the replica that converges,
// another still offers the outdated instances and passes over new ones.
const specHashRefresh = 30 * time.Second

// specHashes are the pools' current spec hashes for the dispatcher, which
// hands a pool's jobs only instances of the current spec. The converger
// runs on one replica at a time and records each pool's hash in the store;
// the other replicas read it from there, at most once an interval, so that
// a replica that lost the lease does not keep a hash from before a roll
// and pass over every instance of the new spec. A replica's own cycles
// are noted at once. For each pool the hash of the later cycle wins.
type specHashes struct {
	store interface {
		ListPoolStatus(ctx context.Context) ([]domain.PoolStatus, error)
	}
	clock domain.Clock
	every time.Duration
	log   *slog.Logger

	mu     sync.Mutex
	byPool map[string]recordedHash
	read   time.Time // when the store was last read
}

type recordedHash struct {
	hash string
	at   time.Time // the cycle that found it
}

func newSpecHashes(st interface {
	ListPoolStatus(ctx context.Context) ([]domain.PoolStatus, error)
}, clk domain.Clock, log *slog.Logger) *specHashes {
	return &specHashes{store: st, clock: clk, every: specHashRefresh, log: log, byPool: map[string]recordedHash{}}
}

// note records what a cycle of this replica's converger found.
func (s *specHashes) note(r converger.Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range r.Pools {
		s.keep(p.Pool, recordedHash{hash: p.SpecHash, at: r.At})
	}
}

// hash is pool's current spec hash, "" while none is known.
func (s *specHashes) hash(ctx context.Context, pool string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := s.clock.Now(); s.read.IsZero() || now.Sub(s.read) >= s.every {
		s.read = now
		list, err := s.store.ListPoolStatus(ctx)
		if err != nil {
			// The hashes held stay in use: at worst a roll's new instances
			// wait for the next read.
			s.log.Warn("read the pools' spec hashes", "err", err)
		}
		for _, st := range list {
			s.keep(st.Name, recordedHash{hash: st.SpecHash, at: st.LastCycle})
		}
	}
	return s.byPool[pool].hash
}

func (s *specHashes) keep(pool string, h recordedHash) {
	if h.hash == "" {
		return
	}
	if old, ok := s.byPool[pool]; !ok || !h.at.Before(old.at) {
		s.byPool[pool] = h
	}
}
