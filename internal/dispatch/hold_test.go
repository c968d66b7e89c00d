package dispatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/queue/keepalive"
)

// stalledGitHub holds each registration until the test lets it go.
type stalledGitHub struct {
	domain.GitHub
	entered, release chan struct{}
}

func (g stalledGitHub) RegisterRunner(ctx context.Context, s domain.Scope, name string, labels []string) (domain.RunnerRegistration, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.GitHub.RegisterRunner(ctx, s, name, labels)
}

// A batch whose registrations outlast the visibility timeout keeps its
// messages invisible: another replica would otherwise take the same job
// and claim a second instance for it.
func TestABatchInHandOutlastingTheVisibilityIsNotTakenAgain(t *testing.T) {
	f := newFixture(t)
	f.members("p", domain.RoleHot, domain.StateReady, 2)
	f.queueJobs("p", 100, 1)
	const visibility = time.Minute
	gh := stalledGitHub{GitHub: f.gh, entered: make(chan struct{}), release: make(chan struct{})}
	d := f.dispatcherWith(func(deps *Deps) {
		deps.GitHub = gh
		deps.Hold = func(queue string, receipts []string, v time.Duration) Held {
			return keepalive.Hold(f.Queue, f.Clock, queue, receipts, v, f.Log)
		}
	}, Options{Wait: -1, Visibility: visibility})
	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	release := sync.OnceFunc(func() { close(gh.release) })
	defer func() { release(); <-done }() // a failed check must not leave the step stalled
	go func() {
		res, err := d.Step(f.Ctx)
		done <- outcome{res, err}
	}()
	<-gh.entered
	f.Clock.Pass(2 * visibility)
	again, err := f.Queue.Receive(f.Ctx, domain.QueuePool, 10, visibility, 0)
	if err != nil || len(again) != 0 {
		t.Fatalf("another replica received %d messages of the batch in hand (%v)", len(again), err)
	}
	release()
	if o := <-done; o.err != nil || o.res.Assigned != 1 {
		t.Errorf("step: %+v %v", o.res, o.err)
	}
	done <- outcome{} // for the deferred wait
}
