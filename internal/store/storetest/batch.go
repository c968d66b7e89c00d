package storetest

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func testBatchMixed(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady), instance("b", domain.StateReady), instance("c", domain.StateReady),
		instance("d", domain.StateReady), instance("f", domain.StateReady))
	e.move("d", readyUnbound, claim("job-x"))
	e.move("d", domain.Guard{State: domain.StateClaimed, Job: "job-x"}, to(domain.StateRunning))
	before := instanceRows.byID(e.list(domain.InstanceFilter{}))
	e.clk.Advance(3*time.Second + 5*time.Microsecond)
	now := e.clk.Now()

	cases := []batchCase[domain.TransitionRequest]{
		{domain.TransitionRequest{ID: "a", Guard: readyUnbound, Apply: claim("job-1")}, wins},
		{domain.TransitionRequest{ID: "b", Guard: domain.Guard{State: domain.StateReady, Job: "zzz"}, Apply: claim("job-2")}, conflicts},
		{domain.TransitionRequest{ID: "ghost", Guard: readyUnbound, Apply: claim("job-3")}, notFound},
		{domain.TransitionRequest{ID: "c", Guard: readyUnbound, Apply: to(domain.StateRunning)}, illegal},
		{domain.TransitionRequest{ID: "d", Guard: domain.Guard{State: domain.StateRunning, Job: "job-x"}, Apply: to(domain.StateReleasing)}, wins},
		{domain.TransitionRequest{ID: "f", Guard: domain.Guard{State: domain.StateReady, Version: 5}, Apply: claim("job-4")}, conflicts},
	}
	instanceRows.checkMixedBatch(t, e, cases, before, now)
}

func testBatchEmpty(t *testing.T, e *env) { instanceRows.checkEmptyBatch(t, e) }

// Two requests for one instance with the same guard are two claims racing:
// whatever order a backend applies them in, exactly one wins.
func testBatchSameInstanceTwice(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady))
	winner := instanceRows.batchWinner(t, e, "claimed the instance",
		domain.TransitionRequest{ID: "a", Guard: readyUnbound, Apply: claim("job-1")},
		domain.TransitionRequest{ID: "a", Guard: readyUnbound, Apply: claim("job-2")})
	got := e.get("a")
	if want := []string{"job-1", "job-2"}[winner]; got.Job != want || got.Version != 2 {
		t.Fatalf("row bound to %q at version %d; want %q at 2", got.Job, got.Version, want)
	}
}
