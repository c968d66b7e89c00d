package rest_test

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/githubtest"
)

// TestContract holds the REST client to the port's contract, against the
// fake GitHub, so the simulated and the real implementations cannot drift.
func TestContract(t *testing.T) {
	githubtest.Run(t, func(t *testing.T) githubtest.Harness {
		srv := fakegh.New()
		t.Cleanup(srv.Close)
		// The suite registers runners in repositories no job names.
		srv.AutoCreate()
		srv.RequireToken(testToken)
		const owner = "contract-org"
		srv.AddOrg(owner)
		return githubtest.Harness{
			GitHub: newClient(t, srv),
			Owner:  owner,
			QueueJob: func(spec githubtest.JobSpec) domain.GitHubJob {
				opts := []fakegh.JobOption{fakegh.Named(spec.Name)}
				if spec.RunID != 0 {
					opts = append(opts, fakegh.InRun(spec.RunID))
				}
				return srv.QueueJob(spec.Repo, spec.Labels, opts...)
			},
			StartRunner: func(reg domain.RunnerRegistration) int64 {
				id, err := srv.RunJIT(reg.JITConfig)
				if err != nil || id == 0 {
					t.Fatalf("runner %d took no job: job %d, error %v", reg.RunnerID, id, err)
				}
				return id
			},
		}
	})
}
