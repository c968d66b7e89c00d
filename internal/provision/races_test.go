package provision

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/serving"
)

// deafRegistrations never delivers the registered signal, so that a
// waiter learns of a registration only by reading the store: as when the
// signal reached another replica.
type deafRegistrations struct{}

func (deafRegistrations) Wait(string) <-chan struct{} { return nil }
func (deafRegistrations) Forget(string)               {}

// An instance that registered just before Serve was told to stop keeps its
// job: undoing it would delete a runner that may have taken the job, and
// give the job a second instance after a restart.
func TestARegistrationJustBeforeStoppingIsKept(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reused bool
		via    domain.Via
	}{
		{"reused instance", true, domain.ViaReuse},
		{"created instance", false, domain.ViaCold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(_ *fixture, d *Deps, _ *Options) { d.Registrations = deafRegistrations{} })
			if tc.reused {
				f.reusable(small, 1, nil)
			}
			f.setAgent(silent)
			f.queueJobs(small, 100, 1)
			ctx, cancel := context.WithCancel(f.Ctx)
			msgs := f.receive()
			done := make(chan struct{})
			go func() {
				defer close(done)
				f.p.Serve(ctx, msgs)
			}()
			f.Clock.BlockUntil(2) // waiting for the registration
			in := f.Instances(domain.InstanceFilter{Job: "100"})[0]
			f.register(in.CloudID)
			cancel()
			<-done

			j := f.wantJob(100, domain.JobAssigned, tc.via, in.ID)
			f.wantState(in.ID, domain.StateRunning)
			f.wantRunner(in.ID, j)
			if rs := f.runners(); len(rs) != 1 || rs[0].Name != j.RunnerName {
				t.Fatalf("runners %+v, want the job's %q kept", rs, j.RunnerName)
			}
			if st := f.Stats(domain.QueueLaunch); st != (domain.QueueStats{}) {
				t.Fatalf("launch queue %+v: a served job must not come back", st)
			}
		})
	}
}

// A roll back terminates only an instance still bound, as it was seen, to a
// job that has not started: it may have moved on meanwhile.
func TestTerminateLeavesAnInstanceThatMovedOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		now  func(*domain.Instance) // the row as it is when terminate looks
		want domain.State
	}{
		{"still bound to the job", func(*domain.Instance) {}, domain.StateTerminating},
		{"bound to another job since", func(in *domain.Instance) { in.Job = "200" }, domain.StateClaimed},
		{"its job started", func(in *domain.Instance) {
			in.State, in.JobStarted = domain.StateRunning, true
		}, domain.StateRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			seen := domain.Instance{ID: "bp-1", CloudID: "i-1", Runner: "small", State: domain.StateClaimed,
				Job: "100", Version: 1, Deadline: t0.Add(5 * time.Minute)}
			row := seen
			tc.now(&row)
			if err := f.Store.CreateInstances(f.Ctx, []domain.Instance{row}); err != nil {
				t.Fatal(err)
			}
			f.p.rollBack(f.Ctx, &request{job: domain.Job{ID: 100}}, seen, serving.Undo{Terminate: "post-claim check failed"}, "post-claim check failed")
			got := f.wantState(seen.ID, tc.want)
			if tc.want != domain.StateTerminating && got.Version != 1 {
				t.Fatalf("instance rewritten (version %d, reason %q)", got.Version, got.Reason)
			}
		})
	}
}

// instanceReads counts the reads of instance rows by id.
type instanceReads struct {
	Store
	n atomic.Int64
}

func (s *instanceReads) GetInstance(ctx context.Context, id string) (domain.Instance, error) {
	s.n.Add(1)
	return s.Store.GetInstance(ctx, id)
}

// A registration wait looks at the store for a signal that reached another
// replica, less and less often (1 s, then twice as long each time up to
// 8 s): a burst of machines booting for a minute each must not read every
// row every second. A registration is still found within 8 s.
func TestARegistrationWaitReadsLessAndLessOften(t *testing.T) {
	reads := &instanceReads{}
	f := newFixture(t, func(_ *fixture, d *Deps, _ *Options) {
		d.Registrations = deafRegistrations{}
		reads.Store = d.Store
		d.Store = reads
	})
	f.setAgent(silent)
	f.queueJobs(small, 100, 1)
	msgs := f.receive()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.p.Serve(f.Ctx, msgs)
	}()
	f.Clock.BlockUntil(2) // the wait's deadline and its first look
	start := f.Clock.Now()
	reads.n.Store(0)
	// Timer by timer: each look reads the row, then sets the next.
	for f.Clock.Now().Sub(start) < 31*time.Second {
		f.Clock.BlockUntil(2)
		next, _ := f.Clock.Next()
		f.Clock.AdvanceTo(next)
	}
	f.Clock.BlockUntil(2)
	// Looks at 1, 3, 7, 15, 23 and 31 s.
	if got := reads.n.Load(); got != 6 {
		t.Fatalf("%d reads in the first 31 s of the wait, want 6", got)
	}

	in := f.Instances(domain.InstanceFilter{Job: "100"})[0]
	f.register(in.CloudID)
	f.Clock.BlockUntil(2)
	next, _ := f.Clock.Next()
	if wait := next.Sub(f.Clock.Now()); wait > 8*time.Second {
		t.Fatalf("the next look comes in %s, want at most 8 s", wait)
	}
	f.Clock.AdvanceTo(next)
	<-done
	f.wantJob(100, domain.JobAssigned, domain.ViaCold, in.ID)
	f.wantState(in.ID, domain.StateRunning)
}
