package agents_test

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// A spot interruption notice takes the instance out of service at once;
// a job it had not started goes back to its queue in the same change.
func TestInterruptedRequeuesAnUnstartedJob(t *testing.T) {
	f := newFixture(t)
	in := f.instance(domain.Instance{ID: "bp-1", State: domain.StateClaimed, Job: "42", Runner: "spot-x64"})
	f.job(domain.Job{ID: 42, Status: domain.JobAssigned, Route: domain.RouteLaunch, InstanceID: in.ID, Via: domain.ViaCold, Attempts: 1})
	if err := f.svc.Signal(f.ctx, domain.Signal{CloudID: in.CloudID, Kind: domain.SignalInterrupted}); err != nil {
		t.Fatal(err)
	}
	if after := f.get(in.ID); after.State != domain.StateTerminating {
		t.Fatalf("instance %s, want terminating", after.State)
	}
	wantRequeued(t, f, domain.RouteLaunch)
	if j := f.getJob(42); j.Interrupted {
		t.Fatal("an unstarted job was marked interrupted")
	}
}

// A job that had started is GitHub's: it is marked interrupted (to be
// re-run), not requeued, and the instance still leaves service.
func TestInterruptedMarksAStartedJob(t *testing.T) {
	f := newFixture(t)
	in := f.instance(domain.Instance{ID: "bp-1", State: domain.StateRunning, Job: "42", JobStarted: true, Runner: "spot-x64"})
	f.job(domain.Job{ID: 42, Status: domain.JobRunning, Route: domain.RouteLaunch, InstanceID: in.ID, Via: domain.ViaCold, Attempts: 1})
	for range 2 { // a repeated notice changes nothing more
		if err := f.svc.Signal(f.ctx, domain.Signal{CloudID: in.CloudID, Kind: domain.SignalInterrupted}); err != nil {
			t.Fatal(err)
		}
	}
	if after := f.get(in.ID); after.State != domain.StateTerminating {
		t.Fatalf("instance %s, want terminating", after.State)
	}
	j := f.getJob(42)
	if !j.Interrupted || j.Status != domain.JobRunning || j.InstanceID != in.ID || j.Attempts != 1 {
		t.Fatalf("job %+v, want it running on %s, marked interrupted", j, in.ID)
	}
	if visible, delayed := f.queued(domain.QueueLaunch); visible+delayed != 0 {
		t.Fatal("a started job was sent back to its queue")
	}
}
