package agents_test

import (
	"slices"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestNextRunsOnlyAJobAssignedToTheInstance(t *testing.T) {
	for _, st := range []domain.State{domain.StateClaimed, domain.StateBooting} {
		t.Run(string(st), func(t *testing.T) {
			f := newFixture(t)
			in, j := f.bound("bp-1", st, 42)
			got, err := f.svc.Next(f.ctx, in.CloudID)
			if err != nil {
				t.Fatal(err)
			}
			a := got.Assignment
			if got.Kind != domain.InstructionRun || a.JobID != 42 || a.RunnerName != j.RunnerName ||
				a.JITConfig != "jit-secret" || !slices.Equal(a.Labels, j.Labels) {
				t.Fatalf("got %+v, want run job 42 with its registration", got)
			}
		})
	}
}

func TestNextWaitsOrReleases(t *testing.T) {
	cases := []struct {
		name string
		in   domain.Instance
		job  *domain.Job // job 42, when written
		want domain.InstructionKind
	}{
		{"idle member", domain.Instance{State: domain.StateReady}, nil, domain.InstructionWait},
		{"booting member", domain.Instance{State: domain.StateBooting}, nil, domain.InstructionWait},
		{"claimed for a job the store no longer has", domain.Instance{State: domain.StateClaimed, Job: "42"}, nil, domain.InstructionWait},
		{"claimed, assignment not recorded yet", domain.Instance{State: domain.StateClaimed, Job: "42"},
			&domain.Job{Status: domain.JobQueued}, domain.InstructionWait},
		{"claimed, job assigned to another instance", domain.Instance{State: domain.StateClaimed, Job: "42"},
			&domain.Job{Status: domain.JobAssigned, InstanceID: "bp-2"}, domain.InstructionWait},
		{"claimed, job already finished", domain.Instance{State: domain.StateClaimed, Job: "42"},
			&domain.Job{Status: domain.JobCompleted, InstanceID: "bp-1"}, domain.InstructionWait},
		{"running its job", domain.Instance{State: domain.StateRunning, Job: "42"},
			&domain.Job{Status: domain.JobRunning, InstanceID: "bp-1", RunnerConfig: "jit"}, domain.InstructionWait},
		{"failed", domain.Instance{State: domain.StateError, Job: "42"},
			&domain.Job{Status: domain.JobAssigned, InstanceID: "bp-1", RunnerConfig: "jit"}, domain.InstructionWait},
		{"releasing", domain.Instance{State: domain.StateReleasing}, nil, domain.InstructionRelease},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.in.ID = "bp-1"
			in := f.instance(tc.in)
			if tc.job != nil {
				tc.job.ID = 42
				if tc.job.Status == domain.JobAssigned && tc.job.RunnerConfig == "" {
					tc.job.RunnerConfig = "jit"
				}
				f.job(*tc.job)
			}
			got, err := f.svc.Next(f.ctx, in.CloudID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != tc.want || got.Assignment.JITConfig != "" {
				t.Fatalf("got %+v, want %s without a credential", got, tc.want)
			}
		})
	}
}
