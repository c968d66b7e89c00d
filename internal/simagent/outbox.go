package simagent

import (
	"errors"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// outbox sends an agent's signals one at a time, in order, retrying the
// first until the control plane takes it: the control plane's state machine
// expects registered before job-started before job-finished, so a later
// signal never overtakes a refused one.
type outbox struct {
	queue   []outgoing
	sending bool         // a delivery is scheduled or in flight
	retry   domain.Timer // the pending retry
}

// outgoing is one signal to send, and what to do once it is accepted.
type outgoing struct {
	sig  domain.Signal       // CloudID and At are filled in when sent
	then func(due time.Time) // nil: nothing
}

// send queues o and starts delivery if none is under way. Called under f.mu.
func (a *agent) send(at time.Time, o outgoing) {
	a.queue = append(a.queue, o)
	if !a.sending {
		a.sending = true
		a.f.after(at, 0, a.deliver)
	}
}

// deliver offers the first queued signal, stamped with the instant it was
// due. Accepted: the next one follows at once, and the signal's
// continuation runs. Refused: it is offered again after RetryEvery.
func (a *agent) deliver(due time.Time) {
	f := a.f
	f.mu.Lock()
	if a.dead || len(a.queue) == 0 {
		a.sending = false
		f.mu.Unlock()
		return
	}
	a.retry = nil
	o := a.queue[0]
	f.mu.Unlock()

	sig := o.sig
	sig.CloudID, sig.At = a.id, due
	err := f.api.Signal(a.ctx, sig)

	f.mu.Lock()
	if errors.Is(err, domain.ErrRejected) {
		// Refused for good: retrying cannot help. Drop it, and let the
		// control plane say what to do once nothing else is queued.
		f.stats.Rejected[sig.Kind]++
		f.log.Debug("signal rejected", "instance", a.id, "kind", sig.Kind, "err", err)
		if !a.dead && a.sent(due) {
			a.step = f.after(due, 0, a.askNext)
		}
		f.mu.Unlock()
		return
	}
	if err != nil {
		f.stats.Refused[sig.Kind]++
		f.log.Debug("signal refused", "instance", a.id, "kind", sig.Kind, "err", err)
		if !a.dead {
			a.retry = f.after(due, f.opts.RetryEvery, a.deliver)
		}
		f.mu.Unlock()
		return
	}
	f.stats.Signals[sig.Kind]++
	if a.dead {
		f.mu.Unlock()
		return
	}
	a.sent(due)
	f.mu.Unlock()
	if o.then != nil {
		o.then(due)
	}
}

// sent drops the signal at the head of the outbox, done with, and delivers
// the next one; it reports whether the outbox is empty, and sending over.
// Called under f.mu, for an agent still alive.
func (a *agent) sent(due time.Time) (empty bool) {
	a.queue = a.queue[1:]
	if len(a.queue) > 0 {
		a.f.after(due, 0, a.deliver)
		return false
	}
	a.sending = false
	return true
}
