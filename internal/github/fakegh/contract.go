package fakegh

import (
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/github/githubtest"
)

// Harness holds gh, a client of this fake, to the GitHub port's contract:
// the suite's jobs are queued here and its runners run here. owner is an
// organisation the cases may use.
func (s *Server) Harness(t *testing.T, gh domain.GitHub, owner string) githubtest.Harness {
	return githubtest.Harness{
		GitHub: gh,
		Owner:  owner,
		QueueJob: func(spec githubtest.JobSpec) domain.GitHubJob {
			opts := []JobOption{Named(spec.Name)}
			if spec.RunID != 0 {
				opts = append(opts, InRun(spec.RunID))
			}
			return s.QueueJob(spec.Repo, spec.Labels, opts...)
		},
		StartRunner: func(reg domain.RunnerRegistration) int64 {
			id, err := s.RunJIT(reg.JITConfig)
			if err != nil || id == 0 {
				t.Fatalf("runner %d took no job: job %d, error %v", reg.RunnerID, id, err)
			}
			return id
		},
	}
}
