package sqlite

// Placeholder so the package builds while job storage is written; replaced
// by the real implementation in the same change series.

import (
	"context"
	"errors"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

var errJobsPending = errors.New("sqlite: job storage not written yet")

func (s *Store) RecordHeartbeat(ctx context.Context, id string, at time.Time) error {
	return errJobsPending
}
func (s *Store) CreateJobs(ctx context.Context, jobs []domain.Job) ([]bool, error) {
	return nil, errJobsPending
}
func (s *Store) GetJob(ctx context.Context, id int64) (domain.Job, error) {
	return domain.Job{}, errJobsPending
}
func (s *Store) ListJobs(ctx context.Context, f domain.JobFilter) ([]domain.Job, error) {
	return nil, errJobsPending
}
func (s *Store) TransitionJob(ctx context.Context, id int64, g domain.JobGuard, fn func(*domain.Job)) (domain.Job, error) {
	return domain.Job{}, errJobsPending
}
func (s *Store) TransitionJobs(ctx context.Context, reqs []domain.JobTransitionRequest) ([]domain.JobTransitionResult, error) {
	return nil, errJobsPending
}
func (s *Store) DeleteJobs(ctx context.Context, before time.Time) (int, error) {
	return 0, errJobsPending
}
