package jobs

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Received is a queue message and the job it names.
type Received struct {
	Msg domain.Message
	Job domain.Job
}

// JobLister reads jobs by id.
type JobLister interface {
	ListJobs(ctx context.Context, f domain.JobFilter) ([]domain.Job, error)
}

// ReadMessages pairs a received batch with its jobs, read in one listing.
// A message with nothing left to do is settled (its receipt is returned in
// settled): one that cannot be read (logged, as it needs a fix of whoever
// sent it), one naming a job the store does not know, one repeating the
// job of an earlier message, and one whose job wanted refuses (cancelled,
// served, moved on). If the listing fails, the unreadable messages are
// still returned as settled, with the error.
func ReadMessages(ctx context.Context, st JobLister, log *slog.Logger, queue string, msgs []domain.Message,
	wanted func(domain.Job) bool) (jobs []Received, settled []string, err error) {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		id, err := Decode(m.Body)
		if err != nil {
			log.Error("dropping unreadable queue message", "queue", queue, "message", m.ID, "err", err)
			settled = append(settled, m.Receipt)
		}
		ids[i] = id
	}
	list, err := st.ListJobs(ctx, domain.JobFilter{IDs: ids})
	if err != nil {
		return nil, settled, fmt.Errorf("read the jobs of %d %s messages: %w", len(msgs), queue, err)
	}
	byID := make(map[int64]domain.Job, len(list))
	for _, j := range list {
		byID[j.ID] = j
	}
	seen := map[int64]bool{}
	for i, m := range msgs {
		if ids[i] == 0 {
			continue
		}
		j, ok := byID[ids[i]]
		if !ok || seen[j.ID] || !wanted(j) {
			settled = append(settled, m.Receipt)
			continue
		}
		seen[j.ID] = true
		jobs = append(jobs, Received{Msg: m, Job: j})
	}
	return jobs, settled, nil
}
