package provision

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Requirements are what a job asks of a reused instance (the resource-pool
// filters). Zero fields do not constrain.
type Requirements struct {
	UsageClass    string   // "spot" or "on-demand"
	InstanceTypes []string // patterns such as "c7a.*" or "m7*"
	CPU           domain.Range
	MemMiB        domain.Range
	ResourceClass string
}

// RequirementsOf derives the filters from a job's runner spec.
func RequirementsOf(s domain.RunnerSpec) Requirements {
	r := Requirements{UsageClass: "on-demand", CPU: s.CPU,
		MemMiB: domain.Range{Min: s.RAM.Min * 1024, Max: s.RAM.Max * 1024}}
	if s.Spot != "" {
		// A spot job takes an idle machine of either kind: an on-demand one
		// (launched by the spot circuit breaker or the on-demand fallback)
		// is already paid for, and only costs less to reuse than to leave
		// idle while a new one boots. An on-demand job never takes spot.
		r.UsageClass = ""
	}
	for _, f := range s.Family {
		if f == "" {
			continue
		}
		if !hasMeta(f) && !containsDot(f) {
			f += "*" // a family such as "c7a" matches every size of it
		}
		r.InstanceTypes = append(r.InstanceTypes, f)
	}
	return r
}

func hasMeta(s string) bool {
	for _, c := range s {
		if c == '*' || c == '?' || c == '[' {
			return true
		}
	}
	return false
}

func containsDot(s string) bool {
	for _, c := range s {
		if c == '.' {
			return true
		}
	}
	return false
}

// Accepts reports whether entry e satisfies r at now, and if not, why.
func (r Requirements) Accepts(e domain.ResourcePoolEntry, now time.Time) (bool, string) {
	switch {
	case !e.Threshold.IsZero() && !now.Before(e.Threshold):
		return false, "expired"
	case r.UsageClass != "" && e.UsageClass != r.UsageClass:
		return false, "usage class"
	case !inRange(e.CPU, r.CPU):
		return false, "cpu"
	case !inRange(e.Mem, r.MemMiB):
		return false, "memory"
	case r.ResourceClass != "" && e.ResourceClass != r.ResourceClass:
		return false, "resource class"
	case len(r.InstanceTypes) > 0 && !matchesAny(e.InstanceType, r.InstanceTypes):
		return false, "instance type"
	}
	return true, ""
}

func inRange(v int, r domain.Range) bool {
	return (r.Min == 0 || v >= r.Min) && (r.Max == 0 || v <= r.Max)
}

func matchesAny(s string, patterns []string) bool {
	for _, p := range patterns {
		if ok, err := path.Match(p, s); err == nil && ok {
			return true
		}
	}
	return false
}

// pickup is the pickup manager for one runner class: it takes a
// candidate off the resource-pool queue, deletes it at once (so other
// pickups do not contend for it), filters it in memory, and re-queues misses
// with a short delay. A search ends globally exhausted (the queue gave
// nothing, and gave nothing again when the store says idle instances of
// the class are there) or locally exhausted (the same instance came round
// N times).
type pickup struct {
	queue        domain.Queue
	store        idleRows
	clock        domain.Clock
	class        string
	requeueDelay time.Duration
	seenLimit    int
	// longPoll is how long a second look at a queue that gave nothing
	// waits for an entry; zero: a second short poll.
	longPoll time.Duration
	mu       sync.Mutex // one receiver per class, a singleton per class
	// emptyAt is when a second look last found the pool empty: for
	// emptyFor after it, an empty receive is taken at its word, so that a
	// burst's searches cost one look at the store, not one each.
	emptyAt time.Time
}

// idleRows lists instances, for the store's view of the idle ones.
type idleRows interface {
	ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error)
}

// emptyFor is how long a pool found empty on a second look is taken to
// stay so.
const emptyFor = time.Second

// search is one request's walk through the queue.
type search struct {
	req  Requirements
	seen map[string]int
}

// next returns a matching entry, or nil when the pool is exhausted for this
// search. The entry has been deleted from the queue: the caller owns it.
func (p *pickup) next(ctx context.Context, s *search) (*domain.ResourcePoolEntry, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := domain.ResourcePoolQueue(p.class)
	for {
		msgs, err := p.queue.Receive(ctx, q, 1, 30*time.Second, 0)
		if err != nil {
			return nil, "", fmt.Errorf("resource pool %s: receive: %w", p.class, err)
		}
		if len(msgs) == 0 {
			if msgs = p.lookAgain(ctx, q); len(msgs) == 0 {
				return nil, "global", nil
			}
		}
		p.emptyAt = time.Time{}
		m := msgs[0]
		if err := p.queue.Delete(ctx, q, []string{m.Receipt}); err != nil {
			return nil, "", fmt.Errorf("resource pool %s: delete: %w", p.class, err)
		}
		var e domain.ResourcePoolEntry
		if err := json.Unmarshal(m.Body, &e); err != nil || e.InstanceID == "" {
			continue // unreadable entries are dropped; the instance ages out by its deadline
		}
		now := p.clock.Now()
		ok, why := s.req.Accepts(e, now)
		if ok {
			return &e, "", nil
		}
		if why == "expired" {
			continue // the entry itself expired: never re-queued
		}
		// A miss goes back for requests with other needs.
		if err := p.queue.Send(ctx, q, []domain.SendRequest{{Body: m.Body, Delay: p.requeueDelay}}); err != nil {
			return nil, "", fmt.Errorf("resource pool %s: requeue: %w", p.class, err)
		}
		s.seen[e.InstanceID]++
		if s.seen[e.InstanceID] >= p.seenLimit {
			return nil, "local", nil
		}
	}
}

// lookAgain receives once more from a queue that gave nothing, when the
// store holds idle instances of the class (ready, launched for jobs, not
// expired) that may have entries there: SQS's short poll samples some of
// its servers and may answer nothing while a few entries wait, and a pool
// of one to three idle machines is that case. A long poll asks every
// server. A store that cannot say leaves the pool as the receive found it.
func (p *pickup) lookAgain(ctx context.Context, q string) []domain.Message {
	now := p.clock.Now()
	if !p.emptyAt.IsZero() && now.Sub(p.emptyAt) < emptyFor {
		return nil
	}
	rows, err := p.store.ListInstances(ctx, domain.InstanceFilter{Runner: p.class, States: []domain.State{domain.StateReady}})
	if err != nil {
		return nil
	}
	idle := slices.ContainsFunc(rows, func(in domain.Instance) bool { return in.Role == domain.RoleOnDemand && !in.Expired(now) })
	var msgs []domain.Message
	if idle {
		msgs, err = p.queue.Receive(ctx, q, 1, 30*time.Second, p.longPoll)
	}
	if err != nil || len(msgs) == 0 {
		p.emptyAt = p.clock.Now()
		return nil
	}
	return msgs
}

// requeue puts an entry back with the requeue delay, for an instance that
// may still be idle although this search could not use it.
func (p *pickup) requeue(ctx context.Context, e domain.ResourcePoolEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return p.queue.Send(ctx, domain.ResourcePoolQueue(p.class), []domain.SendRequest{{Body: b, Delay: p.requeueDelay}})
}
