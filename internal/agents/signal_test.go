package agents_test

import (
	"errors"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/agents"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestWarmReadiesBootingPoolMembers(t *testing.T) {
	const lifetime = 3 * time.Minute
	ready, booting := domain.DefaultDeadlines().Ready, domain.DefaultDeadlines().Booting
	cases := []struct {
		name         string
		in           domain.Instance
		idle         time.Duration
		wantState    domain.State
		wantDeadline time.Duration // after now; 0: deadline untouched
	}{
		{"hot member gets its pool's idle lifetime and a boot for its replacement", domain.Instance{Role: domain.RoleHot, State: domain.StateBooting}, lifetime, domain.StateReady, lifetime + booting},
		{"hot member without a lifetime gets the ready default", domain.Instance{Role: domain.RoleHot, State: domain.StateBooting}, 0, domain.StateReady, ready},
		{"stopped member waits to be parked under the ready default", domain.Instance{Role: domain.RoleStopped, State: domain.StateBooting}, lifetime, domain.StateReady, ready},
		{"cold start bound to a job stays booting", domain.Instance{Role: domain.RoleOnDemand, State: domain.StateBooting, Job: "42"}, lifetime, domain.StateBooting, 0},
		{"claimed instance restarting stays claimed", domain.Instance{Role: domain.RoleStopped, State: domain.StateClaimed, Job: "42"}, lifetime, domain.StateClaimed, 0},
		{"a repeat on a ready member changes nothing", domain.Instance{Role: domain.RoleHot, State: domain.StateReady}, lifetime, domain.StateReady, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.policy.IdleLifetime = tc.idle
			tc.in.ID = "bp-1"
			before := f.CreateInstance(tc.in)
			f.Clock.Advance(time.Minute)
			if err := f.signal(before, domain.SignalWarm, ""); err != nil {
				t.Fatal(err)
			}
			if tc.wantDeadline == 0 {
				f.WantUnchanged(before)
				return
			}
			after := f.Instance("bp-1")
			if after.State != tc.wantState || !after.Deadline.Equal(f.Clock.Now().Add(tc.wantDeadline)) {
				t.Fatalf("got %s until %s, want %s until now+%s", after.State, after.Deadline, tc.wantState, tc.wantDeadline)
			}
		})
	}
}

func TestRegisteredRunsOnlyTheInstancesOwnJob(t *testing.T) {
	for _, st := range []domain.State{domain.StateClaimed, domain.StateBooting} {
		t.Run(string(st), func(t *testing.T) {
			f := newFixture(t)
			in, _ := f.bound("bp-1", st, 42)
			woken := f.svc.Registrations().Wait(in.ID)
			if err := f.signal(in, domain.SignalRegistered, "42"); err != nil {
				t.Fatal(err)
			}
			after := f.Instance(in.ID)
			if after.State != domain.StateRunning || after.Job != "42" {
				t.Fatalf("got %s bound to %q, want running bound to 42", after.State, after.Job)
			}
			f.wantDefaultDeadline(after)
			select {
			case <-woken:
			default:
				t.Fatal("registrations hub not woken")
			}
			if err := f.signal(after, domain.SignalRegistered, "42"); err != nil {
				t.Fatalf("repeat: %v", err)
			}
			f.WantUnchanged(after)
		})
	}
}

func TestRegisteredOutOfPlaceIsRejected(t *testing.T) {
	cases := []struct {
		name  string
		state domain.State
		job   string // the instance's
		sig   string // the signal's
	}{
		{"another job", domain.StateClaimed, "42", "43"},
		{"no job named", domain.StateClaimed, "42", ""},
		{"unbound instance", domain.StateReady, "", "42"},
		{"failed instance", domain.StateError, "42", "42"},
		{"terminating instance", domain.StateTerminating, "42", "42"},
		{"releasing instance", domain.StateReleasing, "", "42"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			before := f.CreateInstance(domain.Instance{ID: "bp-1", State: tc.state, Job: tc.job})
			woken := f.svc.Registrations().Wait(before.ID)
			wantRejected(t, f.signal(before, domain.SignalRegistered, tc.sig))
			f.WantUnchanged(before)
			select {
			case <-woken:
				t.Fatal("a rejected registration woke the hub")
			default:
			}
		})
	}
}

func TestJobStartedProtectsTheInstanceAndRunsTheJob(t *testing.T) {
	f := newFixture(t)
	in, _ := f.bound("bp-1", domain.StateRunning, 42)
	f.Clock.Advance(time.Second)
	if err := f.signal(in, domain.SignalJobStarted, "42"); err != nil {
		t.Fatal(err)
	}
	after := f.Instance(in.ID)
	if !after.JobStarted || after.State != domain.StateRunning {
		t.Fatalf("instance %s started=%v, want running and started", after.State, after.JobStarted)
	}
	j := f.Job(42)
	if j.Status != domain.JobRunning || !j.StartedAt.Equal(f.Clock.Now()) {
		t.Fatalf("job %s started at %s, want running at %s", j.Status, j.StartedAt, f.Clock.Now())
	}
	if err := f.signal(after, domain.SignalJobStarted, "42"); err != nil {
		t.Fatalf("repeat: %v", err)
	}
	f.WantUnchanged(after)
	if again := f.Job(42); again.Version != j.Version {
		t.Fatalf("repeat changed the job: v%d → v%d", j.Version, again.Version)
	}
}

func TestJobStartedOutOfPlaceIsRejected(t *testing.T) {
	t.Run("another job", func(t *testing.T) {
		f := newFixture(t)
		in, _ := f.bound("bp-1", domain.StateRunning, 42)
		wantRejected(t, f.signal(in, domain.SignalJobStarted, "43"))
		f.WantUnchanged(in)
	})
	t.Run("failed instance whose job went back to its queue", func(t *testing.T) {
		f := newFixture(t)
		in, _ := f.bound("bp-1", domain.StateClaimed, 42)
		if err := f.signal(in, domain.SignalFailed, "42"); err != nil {
			t.Fatal(err)
		}
		failed := f.Instance(in.ID)
		wantRejected(t, f.signal(failed, domain.SignalJobStarted, "42"))
		f.WantUnchanged(failed)
		if j := f.Job(42); j.Status != domain.JobQueued {
			t.Fatalf("requeued job is %s, want still queued", j.Status)
		}
	})
}

func TestUnknownCloudIDIsTransient(t *testing.T) {
	f := newFixture(t)
	for _, kind := range []domain.SignalKind{domain.SignalWarm, domain.SignalRegistered, domain.SignalFailed} {
		err := f.svc.Signal(f.Ctx, domain.Signal{CloudID: "i-nobody", Kind: kind, Job: "1"})
		if !errors.Is(err, agents.ErrUnknownInstance) || errors.Is(err, domain.ErrRejected) {
			t.Fatalf("%s: got %v, want ErrUnknownInstance and not ErrRejected", kind, err)
		}
	}
	if _, err := f.svc.Next(f.Ctx, "i-nobody"); !errors.Is(err, agents.ErrUnknownInstance) {
		t.Fatalf("next: got %v", err)
	}
	if err := f.svc.Heartbeat(f.Ctx, "i-nobody"); !errors.Is(err, agents.ErrUnknownInstance) {
		t.Fatalf("heartbeat: got %v", err)
	}
	if err := f.svc.Signal(f.Ctx, domain.Signal{Kind: domain.SignalWarm}); err == nil {
		t.Fatal("a signal without a cloud id was taken")
	}
}

func TestUnknownKindIsRejected(t *testing.T) {
	f := newFixture(t)
	before := f.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateBooting})
	wantRejected(t, f.signal(before, "reboot", ""))
	f.WantUnchanged(before)
	// Refused for what it is, even before the instance is known.
	wantRejected(t, f.svc.Signal(f.Ctx, domain.Signal{CloudID: "i-nobody", Kind: "reboot"}))
}

func TestHeartbeatRecordsTheTime(t *testing.T) {
	f := newFixture(t)
	before := f.CreateInstance(domain.Instance{ID: "bp-1", State: domain.StateReady})
	f.Clock.Advance(5 * time.Second)
	if err := f.svc.Heartbeat(f.Ctx, before.CloudID); err != nil {
		t.Fatal(err)
	}
	if got := f.Instance("bp-1").Heartbeat; !got.Equal(f.Clock.Now()) {
		t.Fatalf("heartbeat %s, want %s", got, f.Clock.Now())
	}
	f.Clock.Advance(5 * time.Second)
	if err := f.signal(before, domain.SignalHeartbeat, ""); err != nil {
		t.Fatal(err)
	}
	after := f.Instance("bp-1")
	if !after.Heartbeat.Equal(f.Clock.Now()) {
		t.Fatalf("heartbeat signal: %s, want %s", after.Heartbeat, f.Clock.Now())
	}
	if after.Version != before.Version {
		t.Fatalf("a heartbeat is not a transition: v%d → v%d", before.Version, after.Version)
	}
}
