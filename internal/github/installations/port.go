package installations

import (
	"context"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// The GitHub port: each call to the installation of the account it concerns.

var _ domain.GitHub = (*GitHub)(nil)

func (g *GitHub) RegisterRunner(ctx context.Context, s domain.Scope, name string, labels []string) (domain.RunnerRegistration, error) {
	c, err := g.client(ctx, s.Owner)
	if err != nil {
		return domain.RunnerRegistration{}, err
	}
	return c.RegisterRunner(ctx, s, name, labels)
}

func (g *GitHub) ListRunners(ctx context.Context, s domain.Scope) ([]domain.GitHubRunner, error) {
	c, err := g.client(ctx, s.Owner)
	if err != nil {
		return nil, err
	}
	return c.ListRunners(ctx, s)
}

func (g *GitHub) DeleteRunner(ctx context.Context, s domain.Scope, id int64) error {
	c, err := g.client(ctx, s.Owner)
	if err != nil {
		return err
	}
	return c.DeleteRunner(ctx, s, id)
}

func (g *GitHub) QueuedJobs(ctx context.Context, s domain.Scope) ([]domain.GitHubJob, error) {
	c, err := g.client(ctx, s.Owner)
	if err != nil {
		return nil, err
	}
	return c.QueuedJobs(ctx, s)
}

func (g *GitHub) GetJob(ctx context.Context, repo string, id int64) (domain.GitHubJob, error) {
	c, err := g.client(ctx, ownerOf(repo))
	if err != nil {
		return domain.GitHubJob{}, err
	}
	return c.GetJob(ctx, repo, id)
}

func (g *GitHub) CancelRun(ctx context.Context, repo string, runID int64) error {
	c, err := g.client(ctx, ownerOf(repo))
	if err != nil {
		return err
	}
	return c.CancelRun(ctx, repo, runID)
}

func (g *GitHub) RerunJob(ctx context.Context, repo string, jobID int64) error {
	c, err := g.client(ctx, ownerOf(repo))
	if err != nil {
		return err
	}
	return c.RerunJob(ctx, repo, jobID)
}
