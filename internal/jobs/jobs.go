// Package jobs holds the operations on jobs that several loops share: the
// queue messages that carry them (jobs.go), their status as GitHub reports
// it (status.go), taking an instance out of service with the job it held
// and sending that job back to its queue (requeue.go), and following
// GitHub's report of which runner took a job (rebind.go).
package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Message is the body of a pool- or launch-queue message.
type Message struct {
	JobID int64 `json:"job"`
}

// Encode renders a queue message for job id.
func Encode(id int64) []byte {
	b, _ := json.Marshal(Message{JobID: id})
	return b
}

// Decode parses a queue message.
func Decode(body []byte) (int64, error) {
	var m Message
	if err := json.Unmarshal(body, &m); err != nil {
		return 0, fmt.Errorf("job message: %w", err)
	}
	if m.JobID <= 0 {
		return 0, fmt.Errorf("job message: no job id in %q", body)
	}
	return m.JobID, nil
}

// QueueFor names the queue a job's route sends it to.
func QueueFor(r domain.Route) string {
	if r == domain.RoutePool {
		return domain.QueuePool
	}
	return domain.QueueLaunch
}

// SendRequest is the message that sends job j to its route's queue. The
// dedup id includes the attempt and the readmission, so a retried send of
// the same attempt is dropped but neither a requeue nor the send of a job
// readmitted after a rejection (whose Attempts a readmission leaves as
// they were). A job never readmitted keeps the id it always had.
func SendRequest(j domain.Job, delay time.Duration) domain.SendRequest {
	id := fmt.Sprintf("job-%d-%d", j.ID, j.Attempts)
	if j.Readmissions > 0 {
		id += fmt.Sprintf("-readmitted-%d", j.Readmissions)
	}
	return domain.SendRequest{Body: Encode(j.ID), Delay: delay, DedupID: id}
}

// retries bounds read-modify-write loops that lose to concurrent writers.

// OfferToResourcePool puts one idle instance's entry in its class's queue.
func OfferToResourcePool(ctx context.Context, q domain.Queue, class string, e domain.ResourcePoolEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := q.Send(ctx, domain.ResourcePoolQueue(class), []domain.SendRequest{{Body: b}}); err != nil {
		return fmt.Errorf("offer %s to the %s resource pool: %w", e.InstanceID, class, err)
	}
	return nil
}
