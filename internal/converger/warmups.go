package converger

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// A pool whose new members keep failing before they warm (a warm-up
// command that exits non-zero, an image that cannot boot the agent) would
// have each failed member terminated and replaced at the next cycle, for
// ever: the creates succeed, so nothing else slows them. Its creates are
// held back instead, minCreateBackoff after the first such failure and
// twice as long after each further one, up to maxCreateBackoff, until a
// member of the pool warms or its spec changes.
//
// The first failure costs one cycle (30 s by default): a single flaky
// warm-up is replaced about as soon as before. The cap is the time a member
// whose warm-up hangs is already given before it is replaced as dangling
// (rebalance.DefaultDanglingAfter), so a broken warm-up launches no faster
// than a hung one, and a fixed one is tried again within ten minutes
// without anyone restarting anything.
const (
	minCreateBackoff = 30 * time.Second
	maxCreateBackoff = 10 * time.Minute
)

// createBackoff is how long a pool's creates wait after failures members
// in a row failed before warming.
func createBackoff(failures int) time.Duration {
	return domain.Doubling(minCreateBackoff, maxCreateBackoff, failures)
}

// ErrWarmUpsFailing says a pool's new members fail before they warm: its
// creates are backed off (see createBackoff).
var ErrWarmUpsFailing = errors.New("new instances fail before they warm")

// warmupsStaleAfter is how many intervals without a cycle make what a
// replica saw of warm-ups stale: the converger's lease was elsewhere
// meanwhile (it is held at least two intervals), and another replica
// followed the warm-ups.
const warmupsStaleAfter = 3

// warmups follows, per pool, the members not yet warm, to count those
// that fail before warming. It lives in the memory of the replica holding
// the converger's lease, and is dropped when that replica has not converged
// for a while: a replica that takes the lease starts with no failures (at
// worst one more round of creates before it backs off in turn), and one
// that takes it back later does not hold creates on what it saw before.
type warmups struct {
	mu    sync.Mutex
	pools map[string]*poolWarmups
	last  time.Time // the last cycle that converged
}

type poolWarmups struct {
	// warming are the ids of members seen pending or booting, or launched
	// by this replica, whose warm-up has not been seen to end.
	warming map[string]bool
	streak  failureStreak
}

// failureStreak is a pool's members that failed before warming since one
// last warmed.
type failureStreak struct {
	hash     string // the spec hash the failed members were launched with
	failures int
	reason   string    // why the last one failed, as its agent said
	until    time.Time // the pool's creates wait until then
}

// capped reports whether the streak has backed creates off as far as they go:
// every warm-up has failed for long enough that a human must look.
func (s failureStreak) capped() bool {
	return s.failures > 0 && createBackoff(s.failures) == maxCreateBackoff
}

// holds reports whether the streak holds back the pool's creates at now.
func (s failureStreak) holds(now time.Time) bool {
	return s.failures > 0 && now.Before(s.until)
}

// err is what the pool status says of the streak; nil when there is none.
func (s failureStreak) err(pool string, now time.Time) error {
	if s.failures == 0 {
		return nil
	}
	next := "creating again"
	if now.Before(s.until) {
		next = "creates held until " + s.until.UTC().Format(time.RFC3339)
	}
	return fmt.Errorf("pool %s: %w: %d in a row, the last: %s; %s", pool, ErrWarmUpsFailing, s.failures, s.reason, next)
}

func newWarmups() *warmups { return &warmups{pools: map[string]*poolWarmups{}} }

func (w *warmups) pool(name string) *poolWarmups {
	p := w.pools[name]
	if p == nil {
		p = &poolWarmups{warming: map[string]bool{}}
		w.pools[name] = p
	}
	return p
}

// launched notes members this replica just launched: one that fails before
// the next cycle lists it booting is still counted.
func (w *warmups) launched(pool string, insts []domain.Instance) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pool(pool)
	for _, in := range insts {
		p.warming[in.ID] = true
	}
}

// warmupChange is what one cycle's observation changed in a pool's streak.
type warmupChange struct {
	before, after failureStreak
	failed        int  // members newly seen failed before warming
	warmed        bool // a member of the current spec warmed
}

// grew reports whether the cycle added failures to the streak.
func (ch warmupChange) grew() bool { return ch.failed > 0 && !ch.warmed }

// observe updates pool's streak from its rows as listed this cycle, whose
// current spec hash is hash ("" when it is not known: the image did not
// resolve). A member followed since before it warmed that is now in error
// failed before warming: the streak grows. One that is ready or beyond
// warmed: the streak ends, whatever else failed in the same cycle. One
// terminating or gone was ended for another reason (excess, dangling,
// interrupted) and counts for neither. Members of another spec than the
// current one count for neither either, and a streak of another spec ends:
// a new image or warm-up deserves a fresh try.
func (w *warmups) observe(pool, hash string, rows []domain.Instance, now time.Time) warmupChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pool(pool)
	ch := warmupChange{before: p.streak}
	current := func(in domain.Instance) bool { return hash == "" || in.SpecHash == hash }
	var failed []domain.Instance
	listed := make(map[string]bool, len(rows))
	for _, in := range rows {
		listed[in.ID] = true
		if in.Role != domain.RoleHot && in.Role != domain.RoleStopped {
			continue
		}
		switch in.State {
		case domain.StatePending, domain.StateBooting:
			p.warming[in.ID] = true
			continue
		}
		if !p.warming[in.ID] {
			continue
		}
		delete(p.warming, in.ID)
		switch in.State {
		case domain.StateTerminating, domain.StateTerminated:
		case domain.StateError:
			if current(in) {
				failed = append(failed, in)
			}
		default: // ready, or parked or serving a job since
			ch.warmed = ch.warmed || current(in)
		}
	}
	ch.failed = len(failed)
	if ch.warmed {
		p.streak = failureStreak{}
		failed = nil
	}
	for _, in := range failed {
		if p.streak.hash != in.SpecHash {
			p.streak = failureStreak{hash: in.SpecHash}
		}
		p.streak.failures++
		p.streak.reason = in.Reason
	}
	for id := range p.warming {
		if !listed[id] {
			delete(p.warming, id)
		}
	}
	if hash != "" && p.streak.hash != hash {
		p.streak = failureStreak{}
	}
	if ch.grew() && p.streak.failures > 0 {
		p.streak.until = now.Add(createBackoff(p.streak.failures))
	}
	ch.after = p.streak
	return ch
}

// forget drops the pools not configured.
func (w *warmups) forget(configured map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	dropUnconfigured(w.pools, configured)
}

// resume starts a cycle at now, first dropping everything when the last
// one was longer than stale ago.
func (w *warmups) resume(now time.Time, stale time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.last.IsZero() && now.Sub(w.last) > stale {
		clear(w.pools)
	}
	w.last = now
}
