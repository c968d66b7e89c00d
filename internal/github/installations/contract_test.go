package installations_test

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/fakegh"
	"github.com/bullpen-ci/bullpen/internal/github/githubtest"
)

// TestContract holds the App, routing each call to its account's
// installation, to the GitHub port's contract against the fake GitHub.
func TestContract(t *testing.T) {
	githubtest.Run(t, func(t *testing.T) githubtest.Harness {
		gh, key := twoAccounts(t)
		gh.AutoCreate() // the suite names repositories no job created
		gh.AddInstallation(103, "acme-other")
		return githubtest.Harness{
			GitHub: newApp(t, gh, appID, key),
			Owner:  "acme",
			QueueJob: func(spec githubtest.JobSpec) domain.GitHubJob {
				opts := []fakegh.JobOption{fakegh.Named(spec.Name)}
				if spec.RunID != 0 {
					opts = append(opts, fakegh.InRun(spec.RunID))
				}
				return gh.QueueJob(spec.Repo, spec.Labels, opts...)
			},
			StartRunner: func(reg domain.RunnerRegistration) int64 {
				id, err := gh.RunJIT(reg.JITConfig)
				if err != nil || id == 0 {
					t.Fatalf("runner %d took no job: job %d, error %v", reg.RunnerID, id, err)
				}
				return id
			},
		}
	})
}
