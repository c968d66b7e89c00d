package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// race runs fn(0..n-1) in n goroutines released together, and waits.
func race(n int, fn func(k int)) {
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() {
			<-gate
			fn(k)
		})
	}
	close(gate)
	wg.Wait()
}

// The provisioning claim workers: many workflows race the same idle instance with
// the condition state == idle && runId == "". Exactly one may win.
func testConcurrentClaims(t *testing.T, e *env) {
	const racers = 64
	e.create(instance("contested", domain.StateReady))
	errs := make([]error, racers)
	race(racers, func(k int) {
		_, errs[k] = e.s.Transition(e.ctx, "contested", readyUnbound, claim(fmt.Sprintf("job-%02d", k)))
	})

	winner := soleWinner(t, "racer", "claimed the instance", errs, instanceRows.conflictErr)
	got := e.get("contested")
	if want := fmt.Sprintf("job-%02d", winner); got.State != domain.StateClaimed || got.Job != want || got.Version != 2 {
		t.Fatalf("final row: state %s job %q version %d; want claimed by %s at version 2", got.State, got.Job, got.Version, want)
	}
}

// Workers claim overlapping windows of a shared set in batches, half of them
// walking their window backwards so that a backend locking rows in request
// order meets the opposite order too. Every instance ends claimed once.
func testConcurrentBatches(t *testing.T, e *env) {
	var insts []domain.Instance
	for k := range 48 {
		insts = append(insts, instance(fmt.Sprintf("i%02d", k), domain.StateReady))
	}
	e.create(insts...)
	claimedBy := instanceRows.raceBatches(t, e, ids(insts),
		func(w int) string { return fmt.Sprintf("job-w%02d", w) },
		func(id, job string) domain.TransitionRequest {
			return domain.TransitionRequest{ID: id, Guard: readyUnbound, Apply: claim(job)}
		})
	for _, inst := range e.list(domain.InstanceFilter{}) {
		if inst.State != domain.StateClaimed || inst.Job != claimedBy[inst.ID] || inst.Version != 2 {
			t.Errorf("%s: state %s job %q version %d; want claimed by %q at version 2",
				inst.ID, inst.State, inst.Job, inst.Version, claimedBy[inst.ID])
		}
	}
}

func testConcurrentLeases(t *testing.T, e *env) {
	const racers = 16
	type outcome struct {
		lease domain.Lease
		ok    bool
		err   error
	}
	out := make([]outcome, racers)
	race(racers, func(k int) {
		l, ok, err := e.s.AcquireLease(e.ctx, "converger", fmt.Sprintf("replica-%02d", k), time.Minute)
		out[k] = outcome{l, ok, err}
	})
	winner := ""
	for k, o := range out {
		if o.err != nil {
			t.Fatalf("racer %d: %v", k, o.err)
		}
		if o.ok {
			if winner != "" {
				t.Fatalf("%s and %s both hold the lease", winner, o.lease.Holder)
			}
			winner = o.lease.Holder
		}
	}
	if winner == "" {
		t.Fatal("nobody acquired the lease")
	}
	for k, o := range out {
		if o.lease.Holder != winner {
			t.Errorf("racer %d was told the holder is %q, want %q", k, o.lease.Holder, winner)
		}
	}
}
