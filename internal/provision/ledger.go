package provision

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/serving"
)

// ledger is one class's provisioning in flight: what it holds, for the dump,
// whether its caller has given up, the first panic of any of its
// goroutines, and the image ids of the batch it belongs to.
type ledger struct {
	quit   <-chan struct{} // closed when the caller's context ends
	images *images         // shared by the classes of one batch

	mu       sync.Mutex
	held     map[string]holding // by instance id
	panicked any
	stack    []byte
}

// holding is an instance provisioning holds for a request: claimed from
// the resource pool, or created for it.
type holding struct {
	inst    domain.Instance
	rq      *request
	created bool
	// threshold is the claimed instance's resource-pool expiry, restored
	// if it goes back.
	threshold time.Time
}

func newLedger(quit <-chan struct{}, imgs *images) *ledger {
	return &ledger{quit: quit, images: imgs, held: map[string]holding{}}
}

func (l *ledger) hold(h holding) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[h.inst.ID] = h
}

func (l *ledger) release(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, id)
}

func (l *ledger) takeAll() []holding {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]holding, 0, len(l.held))
	for _, h := range l.held {
		out = append(out, h)
	}
	clear(l.held)
	return out
}

// stopped reports whether the caller gave up.
func (l *ledger) stopped() bool {
	select {
	case <-l.quit:
		return true
	default:
		return false
	}
}

// guard runs fn, recording a panic instead of letting it take the process
// down: a worker's panic must reach the dump like any other.
func (l *ledger) guard(fn func()) {
	defer func() {
		if r := recover(); r != nil {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.panicked == nil {
				l.panicked, l.stack = r, debug.Stack()
			}
		}
	}()
	fn()
}

// failure returns the first recorded panic, or nil.
func (l *ledger) failure() any {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.panicked
}

// dump is the safety net after an unexpected failure: every claimed
// instance still held goes back to its resource pool, every created one is
// terminated, and their jobs are unbound so that they are requeued. Jobs
// already served keep their instances.
func (p *Provisioner) dump(ctx context.Context, class string, l *ledger, reqs []*request) {
	l.mu.Lock()
	why, stack := fmt.Sprint(l.panicked), string(l.stack)
	l.mu.Unlock()
	p.Log.Error("provisioning panicked; releasing everything it held", "class", class, "panic", why, "stack", stack)
	reason := "provisioning failed: " + why
	for _, h := range l.takeAll() {
		if h.created {
			p.rollBack(ctx, h.rq, h.inst, serving.Undo{Terminate: reason}, reason)
		} else {
			p.giveBack(ctx, h.rq, h.inst, h.threshold, reason)
		}
	}
	for _, rq := range reqs {
		if rq.outcome == "" {
			rq.err = fmt.Errorf("provisioning failed: %v", why)
		}
	}
}
