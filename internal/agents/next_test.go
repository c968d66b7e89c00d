package agents_test

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/jobs"
)

func TestNextStartsTheRunnerRegisteredForTheInstance(t *testing.T) {
	for _, st := range []domain.State{domain.StateClaimed, domain.StateBooting} {
		t.Run(string(st), func(t *testing.T) {
			f := newFixture(t)
			in, _ := f.bound("bp-1", st, 42)
			f.wantToldToRun(in, 42, "bp-1-42")
		})
	}
}

func TestNextWaitsOrReleases(t *testing.T) {
	reg := func(in domain.Instance) domain.Instance {
		in.RunnerName, in.RunnerConfig = "bp-1-42", configOf("bp-1")
		return in
	}
	cases := []struct {
		name string
		in   domain.Instance
		want domain.InstructionKind
	}{
		{"idle member", domain.Instance{State: domain.StateReady}, domain.InstructionWait},
		{"booting member", domain.Instance{State: domain.StateBooting}, domain.InstructionWait},
		{"claimed, runner not recorded yet", domain.Instance{State: domain.StateClaimed, Job: "42"}, domain.InstructionWait},
		{"booting for a job, runner not recorded yet", domain.Instance{State: domain.StateBooting, Job: "42"}, domain.InstructionWait},
		{"claimed, bad job key", reg(domain.Instance{State: domain.StateClaimed, Job: "not-a-job"}), domain.InstructionWait},
		{"running its runner", reg(domain.Instance{State: domain.StateRunning, Job: "42"}), domain.InstructionWait},
		{"failed", reg(domain.Instance{State: domain.StateError, Job: "42"}), domain.InstructionWait},
		{"terminating", reg(domain.Instance{State: domain.StateTerminating, Job: "42"}), domain.InstructionWait},
		{"releasing", domain.Instance{State: domain.StateReleasing}, domain.InstructionRelease},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.in.ID = "bp-1"
			in := f.CreateInstance(tc.in)
			got, err := f.svc.Next(f.Ctx, in.CloudID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != tc.want || got.Assignment.JITConfig != "" {
				t.Fatalf("got %s (config set: %t), want %s without a credential", got.Kind, got.Assignment.JITConfig != "", tc.want)
			}
		})
	}
}

// GitHub gives a just-in-time runner any queued job whose labels it carries:
// bp-1's runner takes job 43, assigned to bp-2. bp-2's agent must still
// start bp-2's own runner (the one left for job 42), and each job's end
// releases the instance that ran it.
func TestNextAfterARebindStartsTheInstancesOwnRunner(t *testing.T) {
	f := newFixture(t)
	f.policy = agentsPolicy(true, 0)
	x, _ := f.bound("bp-1", domain.StateRunning, 42)
	y, _ := f.bound("bp-2", domain.StateClaimed, 43)
	// GitHub's in_progress webhook says bp-1's runner took job 43; then
	// bp-1's agent reports its start, naming its own assignment.
	if _, err := jobs.FollowRunner(f.Ctx, f.Store, f.Queue, 43, f.Instance("bp-1").RunnerName, f.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := f.signal(f.Instance("bp-1"), domain.SignalJobStarted, "42"); err != nil {
		t.Fatalf("bp-1 started its job: %v", err)
	}
	if in, j := f.Instance("bp-1"), f.Job(43); in.Job != "43" || j.InstanceID != "bp-1" || j.Status != domain.JobRunning {
		t.Fatalf("after the swap bp-1 is bound to %q and job 43 (%s) to %q, want each other", in.Job, j.Status, j.InstanceID)
	}

	// bp-2 was handed job 42 (the labels match): it runs its own runner
	// for it, which GitHub will most likely give 42.
	f.wantToldToRun(y, 42, "bp-2-43")
	if got, err := f.svc.Next(f.Ctx, x.CloudID); err != nil || got.Kind != domain.InstructionWait {
		t.Fatalf("bp-1, whose runner is busy: %+v %v, want wait", got.Kind, err)
	}

	// bp-2's runner registers under the job it was given, then takes 42.
	if err := f.signal(y, domain.SignalRegistered, "43"); err != nil {
		t.Fatalf("bp-2 registered: %v", err)
	}
	if err := f.signal(f.Instance("bp-2"), domain.SignalJobStarted, "42"); err != nil {
		t.Fatalf("bp-2 started job 42: %v", err)
	}
	if in, j := f.Instance("bp-2"), f.Job(42); in.Job != "42" || j.InstanceID != "bp-2" || j.Status != domain.JobRunning {
		t.Fatalf("bp-2 bound to %q and job 42 (%s) to %q, want each other", in.Job, j.Status, j.InstanceID)
	}
	for _, jobID := range []int64{43, 42} {
		if err := f.svc.Finish(f.Ctx, jobID, "success"); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"bp-1", "bp-2"} {
		if in := f.Instance(id); in.State != domain.StateReleasing || in.Job != "" {
			t.Fatalf("%s %s bound to %q, want releasing, unbound", id, in.State, in.Job)
		}
		f.wantNoRunner(id)
	}
}

// A real agent cannot know which job GitHub gave its runner: it reports
// its assignment. After the in_progress webhook rebound the instance, such
// reports must apply to the job the runner actually runs, never undo the
// rebind.
func TestRealAgentReportsFollowTheWebhooksRebind(t *testing.T) {
	f := newFixture(t)
	f.policy = agentsPolicy(true, 0)
	x, _ := f.bound("bp-1", domain.StateClaimed, 42) // runner bp-1-42
	f.bound("bp-2", domain.StateClaimed, 43)         // runner bp-2-43
	// GitHub: bp-1's runner took job 43 (the in_progress webhook's rebind).
	if _, err := jobs.FollowRunner(f.Ctx, f.Store, f.Queue, 43, f.Instance("bp-1").RunnerName, f.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	// bp-1's agent reports under its assignment, 42.
	for _, kind := range []domain.SignalKind{domain.SignalRegistered, domain.SignalJobStarted} {
		if err := f.signal(f.Instance(x.ID), kind, "42"); err != nil {
			t.Fatalf("%s 42 from bp-1: %v", kind, err)
		}
	}
	if in := f.Instance("bp-1"); in.Job != "43" || in.State != domain.StateRunning || !in.JobStarted {
		t.Fatalf("bp-1 is %s bound to %q (started %t), want running job 43", in.State, in.Job, in.JobStarted)
	}
	if err := f.signal(f.Instance(x.ID), domain.SignalJobFinished, "42"); err != nil {
		t.Fatal(err)
	}
	if j43, j42 := f.Job(43), f.Job(42); j43.Status != domain.JobCompleted || j42.Status == domain.JobCompleted {
		t.Fatalf("job 43 is %s and job 42 %s: the report finished the wrong job", j43.Status, j42.Status)
	}
	if in := f.Instance("bp-1"); in.State != domain.StateReleasing {
		t.Fatalf("bp-1 is %s after its runner's job, want releasing", in.State)
	}
}
