package provision

import (
	"context"
	"errors"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testworld"
)

var errStoreDown = errors.New("store is down")

// listFailingStore fails its next ListJobs call once armed.
type listFailingStore struct {
	Store
	testworld.FailOnce
}

func (s *listFailingStore) ListJobs(ctx context.Context, filter domain.JobFilter) ([]domain.Job, error) {
	if s.Fire() {
		return nil, errStoreDown
	}
	return s.Store.ListJobs(ctx, filter)
}

// A batch whose jobs cannot be read fails the loop's step, so that the
// loop counts it and backs off, and loses none of its messages: they come
// back after the visibility timeout and are served then.
func TestUnreadableJobsFailTheStepAndKeepTheirMessages(t *testing.T) {
	st := &listFailingStore{}
	f := newFixture(t, func(_ *fixture, d *Deps, _ *Options) {
		st.Store = d.Store
		st.Arm()
		d.Store = st
	})
	f.queueJobs(small, 100, 2)

	if err := f.p.Loop().Step(f.Ctx); !errors.Is(err, errStoreDown) {
		t.Fatalf("step: %v; want the store's error", err)
	}
	if st := f.Stats(domain.QueueLaunch); st.InFlight != 2 || st.Visible+st.Delayed != 0 {
		t.Fatalf("launch queue %+v; want the 2 jobs' messages in flight", st)
	}
	if n := f.cloud.Calls()["CreateFleet"]; n != 0 {
		t.Fatalf("%d fleets for jobs that could not be read", n)
	}

	f.Clock.Advance(f.p.opts.Visibility)
	f.serve()
	f.wantJob(100, domain.JobAssigned, domain.ViaCold, f.Job(100).InstanceID)
	f.wantJob(101, domain.JobAssigned, domain.ViaCold, f.Job(101).InstanceID)
}
