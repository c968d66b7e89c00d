package autoscale

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// RaisedSuffix ends the schedule entry of a pool whose hot target the
// autoscaler raised above its schedule's ("business-hours+autoscale").
const RaisedSuffix = "+autoscale"

// ParamsOf converts a pool's autoscale block to Params.
func ParamsOf(s domain.AutoscaleSpec) Params {
	return Params{
		RunnersPerInstance: s.RunnersPerInstance, MinInstances: s.Min, MaxInstances: s.Max, PollInterval: s.PollInterval,
		ScaleUpThreshold: s.ScaleUpThreshold, ScaleDownThreshold: s.ScaleDownThreshold,
		ScaleUpCooldown: s.ScaleUpCooldown, ScaleDownCooldown: s.ScaleDownCooldown,
		ScaleUpStep: s.ScaleUpStep, ScaleDownStep: s.ScaleDownStep,
		ScaleUpProportion: s.ScaleUpProportion, ScaleDownProportion: s.ScaleDownProportion,
		StabilizationWindow: s.StabilizationWindow, DecayHalfLife: s.DecayHalfLife, BreachThreshold: s.BreachThreshold,
	}
}

// SpecOf is ParamsOf's inverse.
func SpecOf(p Params) domain.AutoscaleSpec {
	return domain.AutoscaleSpec{
		RunnersPerInstance: p.RunnersPerInstance, Min: p.MinInstances, Max: p.MaxInstances, PollInterval: p.PollInterval,
		ScaleUpThreshold: p.ScaleUpThreshold, ScaleDownThreshold: p.ScaleDownThreshold,
		ScaleUpCooldown: p.ScaleUpCooldown, ScaleDownCooldown: p.ScaleDownCooldown,
		ScaleUpStep: p.ScaleUpStep, ScaleDownStep: p.ScaleDownStep,
		ScaleUpProportion: p.ScaleUpProportion, ScaleDownProportion: p.ScaleDownProportion,
		StabilizationWindow: p.StabilizationWindow, DecayHalfLife: p.DecayHalfLife, BreachThreshold: p.BreachThreshold,
	}
}

// PoolScaler lets the hot targets of pools with an autoscale block follow
// their job demand. It keeps one decision state per pool, in memory, on
// the replica converging the pool. Its decisions start from the pool's hot
// target, the schedule's hot value at least, but its count keeps what it
// raised above the schedule and, of the schedule's, only what demand
// needs, so that a pool whose schedule drops keeps its busy spares and
// drops with the schedule when idle. A new state starts from the block's min,
// never from the schedule's hot value: the schedule is only a floor under
// the autoscaler's count, and a count seeded from it would be held however
// low demand stays, so that two replicas seeing the same demand would keep
// different counts after the schedule drops, depending on when each started.
// A replica that starts converging a pool (after a restart, or taking the
// converger's lease from another) resumes instead from the count the
// converger last recorded for it, when the autoscaler had raised it: its hot
// instances would be terminated as excess in the middle of a burst. A state
// left unused for StaleAfter (another replica converged the pool meanwhile)
// is dropped the same way, rather than resumed from a burst long over.
type PoolScaler struct {
	// Demand counts the jobs routed to a pool that are queued or in
	// progress (assigned or running).
	Demand func(ctx context.Context, pool string) (int, error)
	// Recorded returns the status the converger last recorded for a pool,
	// on whichever replica; ok is false when there is none. Nil: pools
	// start from their schedules.
	Recorded func(ctx context.Context, pool string) (s domain.PoolStatus, ok bool, err error)
	// StaleAfter is how long a pool's state may go unused before it is
	// dropped, and how old a recorded status may be to resume from; 0:
	// states are kept and statuses trusted however old.
	StaleAfter time.Duration
	Log        *slog.Logger
	// Metrics counts the decisions and shows what they decided from; nil
	// counts and shows nothing.
	Metrics *PoolMetrics

	mu    sync.Mutex
	pools map[string]*poolState
}

type poolState struct {
	mu sync.Mutex // a pool is converged by one goroutine at a time; Last may read meanwhile
	State
	// count is the autoscaler's own count: what it raised above the
	// schedule, or of what the schedule held, as much as the last demand
	// justified.
	count int
	// held is the last decision's count when it sat at the schedule's hot
	// value, 0 otherwise: the next poll bounds it by its own demand.
	held int
	// capped: the last decision wanted more than MAX_INSTANCES.
	capped   bool
	lastPoll time.Time
	lastSeen time.Time // the last Adjust: the last cycle of this replica over the pool
	decision Decision
}

// Adjust returns the pool's target at at: the schedule's, with the hot
// count raised to the autoscaler's (never below the schedule's hot value,
// never above the block's max). It decides at most once per poll interval.
func (s *PoolScaler) Adjust(ctx context.Context, p domain.Pool, at time.Time, entry string, t domain.Target) (string, domain.Target) {
	if p.Autoscale == nil {
		s.forget(p.Name) // its block was removed
		return entry, t
	}
	params := ParamsOf(*p.Autoscale)
	st := s.state(p.Name)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lastSeen.IsZero() || (s.StaleAfter > 0 && at.Sub(st.lastSeen) > s.StaleAfter) {
		st.State, st.lastPoll, st.decision, st.held, st.capped = State{}, time.Time{}, Decision{}, 0, false
		st.count = s.resumeCount(ctx, p.Name, at, params.MinInstances)
	}
	st.lastSeen = at
	if st.lastPoll.IsZero() || !at.Before(st.lastPoll.Add(params.PollInterval)) {
		demand, err := s.Demand(ctx, p.Name)
		switch {
		case err != nil && ctx.Err() != nil:
			// The cycle ends (a stop, a lease lost): the poll is not
			// skipped for the store's sake, and the next cycle polls.
		case err != nil:
			// Never scale on partial data: keep the count, try next cycle.
			s.Log.Warn("pool demand unknown; autoscaler skips this poll", "pool", p.Name, "err", err)
			s.Metrics.skippedPoll(p.Name)
		default:
			st.lastPoll = at
			// Decide from what the pool holds: a count left below the
			// schedule's hot value would spend its first scale-ups climbing
			// back to it, changing nothing, while jobs wait.
			floor := min(t.Hot, params.MaxInstances)
			holding := leastHolding(params, demand)
			count := st.count
			if st.held > 0 {
				count = min(st.held, holding)
			}
			current := min(max(count, floor), params.MaxInstances)
			d := decideAbove(params, &st.State, at, demand, current, max(params.MinInstances, floor))
			st.count, st.held, st.decision = d.New, 0, d
			if d.New <= floor {
				// Of what the schedule holds, the count keeps what this
				// demand needs, and the next poll bounds it by its own:
				// when the schedule drops, the pool keeps the spares its
				// jobs need, for scale-downs to remove as demand falls,
				// rather than terminating them and creating them again on
				// the next up breaches. Without demand it drops with the
				// schedule at once; what it keeps depends on demand alone,
				// so replicas that started at different times keep the same.
				st.count, st.held = min(d.New, holding), d.New
			}
			s.Metrics.decided(p.Name, d, demand, score(st.UpBreaches, at, params.DecayHalfLife),
				score(st.DownBreaches, at, params.DecayHalfLife))
			level := slog.LevelDebug
			if d.Action != ActionNone || (d.Capped && !st.capped) {
				// A pool held at its max while demand asks for more is
				// worth seeing, once as it starts: at every poll it would
				// drown the decisions that change something.
				level = slog.LevelInfo
			}
			st.capped = d.Capped
			s.Log.Log(ctx, level, "pool autoscaler", "pool", p.Name, "demand", demand, "action", d.Action,
				"count", d.New, "score", d.Score, "reason", d.Reason)
		}
	}
	hot := min(max(st.count, t.Hot), params.MaxInstances)
	if hot > t.Hot {
		entry += RaisedSuffix
	}
	t.Hot = hot
	return entry, t
}

// Retain forgets the pools that are not among pools with an autoscale
// block: their states and their metric series. Pools leave with the
// configuration; a removed pool's last demand and scores would otherwise
// be served for as long as the process runs, and its state resumed if a
// pool of that name came back.
func (s *PoolScaler) Retain(pools []domain.Pool) {
	kept := make(map[string]bool, len(pools))
	for _, p := range pools {
		if p.Autoscale != nil {
			kept[p.Name] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.pools {
		if !kept[name] {
			delete(s.pools, name)
			s.Metrics.forget(name)
		}
	}
}

// forget drops pool's state and series, if it has any.
func (s *PoolScaler) forget(pool string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pools[pool]; ok {
		delete(s.pools, pool)
		s.Metrics.forget(pool)
	}
}

// leastHolding is the smallest count, MIN_INSTANCES at least, on which
// demand is not an up breach: the count a pool may keep of its schedule's
// when the schedule drops, without starting a climb back.
func leastHolding(p Params, demand int) int {
	perInstance := float64(p.RunnersPerInstance) * p.ScaleUpThreshold
	n := max(int(math.Ceil(float64(demand)/perInstance)), p.MinInstances)
	// The division and upBreach's tolerance may disagree by one.
	for n > p.MinInstances && !upBreach(p, demand, n-1) {
		n--
	}
	for upBreach(p, demand, n) {
		n++
	}
	return n
}

func (s *PoolScaler) state(pool string) *poolState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pools == nil {
		s.pools = map[string]*poolState{}
	}
	st, ok := s.pools[pool]
	if !ok {
		st = &poolState{}
		s.pools[pool] = st
	}
	return st
}

// resumeCount is the count a pool's new state starts from: the hot target
// last recorded for the pool when the autoscaler had raised it above the
// schedule, and recently enough; else floor, the block's min.
func (s *PoolScaler) resumeCount(ctx context.Context, pool string, at time.Time, floor int) int {
	if s.Recorded == nil {
		return floor
	}
	rec, ok, err := s.Recorded(ctx, pool)
	switch {
	case err != nil:
		s.Log.Warn("pool status unreadable; autoscaler starts from the block's min", "pool", pool, "err", err)
		return floor
	case !ok || !strings.HasSuffix(rec.Schedule, RaisedSuffix) || rec.Target.Hot <= floor:
		return floor
	case s.StaleAfter > 0 && at.Sub(rec.LastCycle) > s.StaleAfter:
		return floor
	}
	s.Log.Info("pool autoscaler resumes from the hot count last recorded", "pool", pool, "count", rec.Target.Hot,
		"recorded_at", rec.LastCycle)
	return rec.Target.Hot
}

// Last returns the last decision made for pool, while this replica still
// scales it at now: once its state has gone unused for StaleAfter, another
// replica converges the pool, and a decision of this one's, perhaps hours
// old, would be shown as the pool's.
func (s *PoolScaler) Last(pool string, now time.Time) (Decision, bool) {
	s.mu.Lock()
	st, ok := s.pools[pool]
	s.mu.Unlock()
	if !ok {
		return Decision{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if s.StaleAfter > 0 && now.Sub(st.lastSeen) > s.StaleAfter {
		return Decision{}, false
	}
	return st.decision, true
}
