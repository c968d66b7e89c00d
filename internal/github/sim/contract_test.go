package sim_test

import (
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/githubtest"
	"github.com/bullpen-ci/bullpen/internal/github/sim"
)

var epoch = time.Date(2025, 3, 3, 9, 0, 0, 0, time.UTC)

func TestContract(t *testing.T) {
	githubtest.Run(t, func(t *testing.T) githubtest.Harness {
		// The clock never moves, so a job a runner takes never ends.
		gh := sim.New(clock.NewVirtual(epoch), sim.Options{Enterprise: "contract-enterprise"})
		return githubtest.Harness{
			GitHub:     gh,
			Owner:      "contract-org",
			Enterprise: "contract-enterprise",
			QueueJob: func(spec githubtest.JobSpec) domain.GitHubJob {
				return gh.QueueJob(sim.JobSpec{Repo: spec.Repo, Name: spec.Name, Labels: spec.Labels, RunID: spec.RunID, Duration: time.Hour})
			},
			StartRunner: func(reg domain.RunnerRegistration) int64 {
				started := make(chan int64, 1)
				if err := gh.RunJIT(t.Context(), reg.JITConfig, func(id int64) { started <- id }, nil); err != nil {
					t.Fatalf("RunJIT: %v", err)
				}
				select {
				case id := <-started:
					return id
				default:
					t.Fatalf("runner %d took no job", reg.RunnerID)
					return 0
				}
			},
		}
	})
}
