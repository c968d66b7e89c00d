package provision

import (
	"sync"
	"time"
)

// awaiting is what provisioning waits for: the machines handed to jobs
// whose runners have not registered yet. A loop that stops says from it
// what it still waits for, since the wait for a cold start is long and
// otherwise silent.
type awaiting struct {
	mu       sync.Mutex
	machines map[string]awaited // by instance id
	cut      int                // waits cut short since the loop stopped
}

type awaited struct {
	created  bool // a new machine; else a reused one
	deadline time.Time
}

// add notes a wait for instance id until deadline; the returned func ends
// it.
func (a *awaiting) add(id string, created bool, deadline time.Time) func() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.machines == nil {
		a.machines = map[string]awaited{}
	}
	a.machines[id] = awaited{created: created, deadline: deadline}
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.machines, id)
	}
}

func (a *awaiting) noteCut() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cut++
}

// summary counts the new and reused machines waited for, and how long the
// longest wait may still last from now.
func (a *awaiting) summary(now time.Time) (created, reused int, longest time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range a.machines {
		if m.created {
			created++
		} else {
			reused++
		}
		longest = max(longest, m.deadline.Sub(now))
	}
	return created, reused, longest
}

func (a *awaiting) cutShort() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cut
}

// finish is the provision loop's end: it waits for the batches in hand
// (batches of them), saying once what for and how long at most. With
// Options.StopWait, it closes cut once that has passed, which ends the
// waits as a cancelled Serve does: their machines are let go and their
// jobs requeued, so that the process stops within its shutdown grace.
func (p *Provisioner) finish(batches int, wg *sync.WaitGroup, cut chan<- struct{}) {
	if batches == 0 {
		wg.Wait()
		return
	}
	created, reused, longest := p.awaiting.summary(p.Clock.Now())
	bound := longest
	if created+reused == 0 {
		bound = p.opts.CreationTimeout // still launching: its machines get this long
	}
	if p.opts.StopWait > 0 {
		t := p.Clock.AfterFunc(p.opts.StopWait, func() { close(cut) })
		defer t.Stop()
		bound = min(bound, p.opts.StopWait)
	}
	cutBefore := p.awaiting.cutShort()
	p.Log.Info("stopping: waiting for the machines in hand to register their runners",
		"new_machines", created, "reused_machines", reused, "batches", batches, "up_to", bound.Round(time.Second))
	wg.Wait()
	if n := p.awaiting.cutShort() - cutBefore; n > 0 {
		p.Log.Info("stopped waiting for machines to register: new ones terminated, reused ones given back, their jobs requeued",
			"machines", n, "waited", p.opts.StopWait)
	}
}
