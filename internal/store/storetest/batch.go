package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func batchContracts() []contract {
	return []contract{
		{"BatchMixedOutcomesInRequestOrder", testBatchMixed},
		{"BatchOfNothing", testBatchEmpty},
		{"BatchSameInstanceTwiceOneWins", testBatchSameInstanceTwice},
	}
}

// outcome is what one request of a batch should come to.
type outcome int

const (
	wins outcome = iota
	conflicts
	notFound
	illegal
)

func (o outcome) check(t *testing.T, k int, r domain.TransitionResult) {
	t.Helper()
	var te *domain.TransitionError
	var ce *domain.ConflictError
	switch {
	case o == wins && r.Err != nil:
		t.Errorf("request %d: got %v, want success", k, r.Err)
	case o == conflicts && !(errors.Is(r.Err, domain.ErrConflict) && errors.As(r.Err, &ce)):
		t.Errorf("request %d: got %v, want a *ConflictError", k, r.Err)
	case o == notFound && !errors.Is(r.Err, domain.ErrNotFound):
		t.Errorf("request %d: got %v, want ErrNotFound", k, r.Err)
	case o == illegal && !errors.As(r.Err, &te):
		t.Errorf("request %d: got %v, want a *TransitionError", k, r.Err)
	}
}

func testBatchMixed(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady), instance("b", domain.StateReady), instance("c", domain.StateReady),
		instance("d", domain.StateReady), instance("f", domain.StateReady))
	e.move("d", readyUnbound, claim("job-x"))
	e.move("d", domain.Guard{State: domain.StateClaimed, Job: "job-x"}, to(domain.StateRunning))
	before := map[string]domain.Instance{}
	for _, inst := range e.list(domain.InstanceFilter{}) {
		before[inst.ID] = inst
	}
	e.clk.Advance(3*time.Second + 5*time.Microsecond)
	now := e.clk.Now()

	cases := []struct {
		req  domain.TransitionRequest
		want outcome
	}{
		{domain.TransitionRequest{ID: "a", Guard: readyUnbound, Apply: claim("job-1")}, wins},
		{domain.TransitionRequest{ID: "b", Guard: domain.Guard{State: domain.StateReady, Job: "zzz"}, Apply: claim("job-2")}, conflicts},
		{domain.TransitionRequest{ID: "ghost", Guard: readyUnbound, Apply: claim("job-3")}, notFound},
		{domain.TransitionRequest{ID: "c", Guard: readyUnbound, Apply: to(domain.StateRunning)}, illegal},
		{domain.TransitionRequest{ID: "d", Guard: domain.Guard{State: domain.StateRunning, Job: "job-x"}, Apply: to(domain.StateReleasing)}, wins},
		{domain.TransitionRequest{ID: "f", Guard: domain.Guard{State: domain.StateReady, Version: 5}, Apply: claim("job-4")}, conflicts},
	}
	reqs := make([]domain.TransitionRequest, len(cases))
	for k, c := range cases {
		reqs[k] = c.req
	}
	results, err := e.s.TransitionBatch(e.ctx, reqs)
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	if len(results) != len(reqs) {
		t.Fatalf("got %d results for %d requests", len(results), len(reqs))
	}
	for k, c := range cases {
		c.want.check(t, k, results[k])
		id := c.req.ID
		switch {
		case c.want == wins:
			got := results[k].Instance
			if got.ID != id || got.Version != before[id].Version+1 || !got.UpdatedAt.Equal(now) {
				t.Errorf("request %d: wrote %+v", k, got)
			}
			sameInstance(t, "stored winner", e.get(id), got)
		case c.want != notFound:
			e.unchanged(before[id])
		}
	}
}

func testBatchEmpty(t *testing.T, e *env) {
	results, err := e.s.TransitionBatch(e.ctx, nil)
	if err != nil || len(results) != 0 {
		t.Fatalf("empty batch: %v, %v", results, err)
	}
}

// Two requests for one instance with the same guard are two claims racing:
// whatever order a backend applies them in, exactly one wins.
func testBatchSameInstanceTwice(t *testing.T, e *env) {
	e.create(instance("a", domain.StateReady))
	results, err := e.s.TransitionBatch(e.ctx, []domain.TransitionRequest{
		{ID: "a", Guard: readyUnbound, Apply: claim("job-1")},
		{ID: "a", Guard: readyUnbound, Apply: claim("job-2")},
	})
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	winner := -1
	for k, r := range results {
		switch {
		case r.Err == nil && winner < 0:
			winner = k
		case r.Err == nil:
			t.Fatalf("both claims won: %+v", results)
		case !errors.Is(r.Err, domain.ErrConflict):
			t.Fatalf("request %d: got %v, want ErrConflict", k, r.Err)
		}
	}
	if winner < 0 {
		t.Fatal("neither claim won")
	}
	got := e.get("a")
	if want := []string{"job-1", "job-2"}[winner]; got.Job != want || got.Version != 2 {
		t.Fatalf("row bound to %q at version %d; want %q at 2", got.Job, got.Version, want)
	}
}
