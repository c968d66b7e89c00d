package provision

import (
	"context"
	"sync"

	"github.com/bullpen-ci/bullpen/internal/clock"
)

// waves hands a class's requests to creation as their searches end
// without an instance, rather than once every search has ended: a search
// that claimed an instance waits for its registration (up to
// RegistrationTimeout, more when it fails and the next candidate is
// tried), and the cold starts of the batch waited with it. Those that
// came up empty are gathered until no search is still looking, so that a
// burst's cold starts still share one fleet, and each such wave is
// created while later ones gather.
type waves struct {
	mu        sync.Mutex
	searching int // workers still looking for a candidate, or not started
	left      int // workers not done
	empty     []*request
	changed   chan struct{} // closed at every change, then replaced
}

func newWaves(n int) *waves {
	return &waves{searching: n, left: n, changed: make(chan struct{})}
}

func (w *waves) update(fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fn()
	close(w.changed)
	w.changed = make(chan struct{})
}

// waiting: a worker claimed a candidate and waits for it.
func (w *waves) waiting() { w.update(func() { w.searching-- }) }

// looking: the worker's candidate failed; it looks for another.
func (w *waves) looking() { w.update(func() { w.searching++ }) }

// done: a worker ended, while looking or not; rq goes to creation when
// its search found nothing.
func (w *waves) done(rq *request, wasLooking bool) {
	w.update(func() {
		w.left--
		if wasLooking {
			w.searching--
		}
		if rq.outcome == "" && rq.err == nil {
			w.empty = append(w.empty, rq)
		}
	})
}

// next returns the next wave to create, or nil with the channel that
// closes at the next change; nil, nil when every worker is done and every
// wave taken.
func (w *waves) next() ([]*request, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.searching == 0 && len(w.empty) > 0 {
		wave := w.empty
		w.empty = nil
		return wave, nil
	}
	if w.left == 0 {
		return nil, nil
	}
	return nil, w.changed
}

// provisionClass runs selection for every request in parallel and
// creation for those it could not serve, in waves.
func (p *Provisioner) provisionClass(ctx context.Context, class string, reqs []*request, led *ledger) {
	w := newWaves(len(reqs))
	selected := p.tasks.Go(func() {
		clock.Each(p.tasks, len(reqs), p.opts.Parallelism, func(i int) {
			looking := true
			defer func() { w.done(reqs[i], looking) }()
			led.guard(func() { p.selectFor(ctx, class, reqs[i], led, w, &looking) })
		})
	})
	var creating []<-chan struct{}
	for {
		wave, changed := w.next()
		if wave == nil && changed == nil {
			break
		}
		if wave == nil {
			p.tasks.Await(changed)
			continue
		}
		if led.failure() != nil || led.stopped() {
			continue // left unserved: requeued
		}
		creating = append(creating, p.tasks.Go(func() {
			led.guard(func() { p.create(ctx, class, wave, led) })
		}))
	}
	p.tasks.Await(selected)
	for _, c := range creating {
		p.tasks.Await(c)
	}
}
