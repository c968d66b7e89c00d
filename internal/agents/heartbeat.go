package agents

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/loop"
)

// Heartbeat records that the instance's agent is alive.
func (s *Service) Heartbeat(ctx context.Context, cloudID string) error {
	id, ok := s.idOf.get(cloudID)
	if !ok {
		in, err := s.lookup(ctx, cloudID)
		if err != nil {
			return err
		}
		id = in.ID
		s.idOf.put(cloudID, in.ID)
	}
	s.metrics.heartbeats.Inc()
	if s.opts.HeartbeatFlush <= 0 {
		return s.store.RecordHeartbeat(ctx, id, s.clock.Now())
	}
	s.beatsMu.Lock()
	s.beats[id] = s.clock.Now()
	s.beatsMu.Unlock()
	return nil
}

// FlushHeartbeats writes the heartbeats kept in memory. A batch the store
// did not take is kept for the next flush: else an instance that beat
// during a store outage would look silent for another heartbeat interval.
func (s *Service) FlushHeartbeats(ctx context.Context) error {
	s.beatsMu.Lock()
	pending := s.beats
	s.beats = make(map[string]time.Time, len(pending))
	s.beatsMu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	batch := s.beatsToWrite(pending)
	if len(batch) == 0 {
		return nil
	}
	if err := s.store.RecordHeartbeats(ctx, batch); err != nil {
		s.keepBeats(pending)
		return fmt.Errorf("write %d heartbeats, kept for the next flush: %w", len(batch), err)
	}
	s.noteWritten(batch)
	return nil
}

// beatsToWrite is the pending beats that are not within the resolution of
// the last one written for their instance.
func (s *Service) beatsToWrite(pending map[string]time.Time) []domain.Heartbeat {
	s.beatsMu.Lock()
	defer s.beatsMu.Unlock()
	res := s.opts.HeartbeatResolution
	batch := make([]domain.Heartbeat, 0, len(pending))
	for id, at := range pending {
		if last, ok := s.written[id]; ok && res > 0 && at.Sub(last) < res {
			continue
		}
		batch = append(batch, domain.Heartbeat{ID: id, At: at})
	}
	return batch
}

// noteWritten remembers the beats written, and forgets instances whose
// last beat is older than the resolution: their next beat is written
// anyway, and machines come and go.
func (s *Service) noteWritten(batch []domain.Heartbeat) {
	res := s.opts.HeartbeatResolution
	if res <= 0 {
		return
	}
	s.beatsMu.Lock()
	defer s.beatsMu.Unlock()
	if s.written == nil {
		s.written = make(map[string]time.Time, len(batch))
	}
	for _, b := range batch {
		s.written[b.ID] = b.At
	}
	now := s.clock.Now()
	for id, at := range s.written {
		if now.Sub(at) >= res {
			delete(s.written, id)
		}
	}
}

// keepBeats puts back beats a flush did not write, unless a newer beat of
// the same instance came meanwhile. What is kept stays one beat an instance
// (writing a beat again is harmless: the store keeps the latest).
func (s *Service) keepBeats(unwritten map[string]time.Time) {
	s.beatsMu.Lock()
	defer s.beatsMu.Unlock()
	for id, at := range unwritten {
		if newer, ok := s.beats[id]; !ok || newer.Before(at) {
			s.beats[id] = at
		}
	}
}

// Loop writes batched heartbeats every HeartbeatFlush, and once more when
// it ends.
func (s *Service) Loop() loop.Loop {
	if s.opts.HeartbeatFlush <= 0 {
		return loop.Loop{Name: "heartbeats", Step: func(ctx context.Context) error { <-ctx.Done(); return nil }}
	}
	return loop.Loop{Name: "heartbeats", Every: s.opts.HeartbeatFlush, Step: s.FlushHeartbeats, Final: s.FlushHeartbeats}
}

// idCache maps cloud ids to instance ids, which never change once recorded,
// so that a heartbeat costs no store read. It is emptied when full: machines
// come and go, and a forgotten entry only costs one lookup.
type idCache struct {
	mu sync.Mutex
	m  map[string]string
}

// maxCachedIDs bounds the cache: far more than the live fleet of one stack.
const maxCachedIDs = 50_000

func (c *idCache) get(cloudID string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.m[cloudID]
	return id, ok
}

func (c *idCache) put(cloudID, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedIDs {
		c.m = make(map[string]string)
	}
	c.m[cloudID] = id
}
