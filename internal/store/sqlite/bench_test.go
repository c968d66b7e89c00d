package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/storetest"
)

// readyInstances creates n ready rows and returns their ids.
func readyInstances(b *testing.B, s *Store, n int) []string {
	b.Helper()
	ids := make([]string, n)
	for k := range ids {
		ids[k] = fmt.Sprintf("i-%08d", k)
	}
	for _, chunk := range domain.Chunk(ids, 1000) {
		insts := make([]domain.Instance, len(chunk))
		for k, id := range chunk {
			insts[k] = domain.Instance{ID: id, State: domain.StateReady, Pool: "linux", Runner: "small"}
		}
		if err := s.CreateInstances(b.Context(), insts); err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(b.Context(), tempPathB(b), clock.NewVirtual(epoch))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func tempPathB(b *testing.B) string { return b.TempDir() + "/bench.db" }

func claimFor(job string) func(*domain.Instance) {
	return func(i *domain.Instance) { i.State, i.Job = domain.StateClaimed, job }
}

// BenchmarkTransition claims b.N distinct ready instances, one guarded
// transaction each.
func BenchmarkTransition(b *testing.B) {
	s := benchStore(b)
	ids := readyInstances(b, s, b.N)
	guard := domain.Guard{State: domain.StateReady}
	b.ResetTimer()
	for k := range b.N {
		if _, err := s.Transition(b.Context(), ids[k], guard, claimFor("job")); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "transitions/s")
}

// batchSize is how many requests each call of the batch benchmarks carries.
const batchSize = 100

// BenchmarkTransitionBatch claims 100 instances per TransitionBatch call.
func BenchmarkTransitionBatch(b *testing.B) {
	s := benchStore(b)
	ids := readyInstances(b, s, b.N*batchSize)
	benchBatches(b, func(n int) domain.TransitionRequest {
		return domain.TransitionRequest{ID: ids[n], Guard: domain.Guard{State: domain.StateReady}, Apply: claimFor("job")}
	}, s.TransitionBatch, func(r domain.TransitionResult) error { return r.Err })
}

// benchBatches sends b.N batches of batchSize requests, the nth request of
// the run being request(n), and reports the transitions made per second.
// Every request must succeed.
func benchBatches[Req, Res any](b *testing.B, request func(n int) Req,
	send func(context.Context, []Req) ([]Res, error), errOf func(Res) error) {
	reqs := make([]Req, batchSize)
	b.ResetTimer()
	for k := range b.N {
		for j := range reqs {
			reqs[j] = request(k*batchSize + j)
		}
		results, err := send(b.Context(), reqs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range results {
			if err := errOf(r); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*batchSize)/b.Elapsed().Seconds(), "transitions/s")
}

func TestMeasureCASRateLeavesNoRows(t *testing.T) {
	s := openAt(t, tempPath(t), clock.NewVirtual(epoch))
	rate, err := storetest.MeasureCASRate(t.Context(), s, 200)
	if err != nil {
		t.Fatal(err)
	}
	if rate <= 0 {
		t.Fatalf("rate %v, want positive", rate)
	}
	if left, err := s.ListInstances(t.Context(), domain.InstanceFilter{}); err != nil || len(left) != 0 {
		t.Fatalf("rows left behind: %d, %v", len(left), err)
	}
}

// queuedJobs creates n queued jobs with ids 1..n.
func queuedJobs(b *testing.B, s *Store, n int) {
	b.Helper()
	for first := 1; first <= n; first += 1000 {
		var jobs []domain.Job
		for id := first; id < first+1000 && id <= n; id++ {
			jobs = append(jobs, domain.Job{ID: int64(id), Status: domain.JobQueued, Pool: "linux", Labels: []string{"runs-on=1/pool=linux"}})
		}
		if _, err := s.CreateJobs(b.Context(), jobs); err != nil {
			b.Fatal(err)
		}
	}
}

func assignTo(instance string) func(*domain.Job) {
	return func(j *domain.Job) {
		j.Status, j.InstanceID, j.RunnerName, j.RunnerID = domain.JobAssigned, instance, instance+"-1", 7
	}
}

// BenchmarkJobTransition assigns b.N distinct queued jobs, one guarded
// transaction each.
func BenchmarkJobTransition(b *testing.B) {
	s := benchStore(b)
	queuedJobs(b, s, b.N)
	guard := domain.JobGuard{Status: domain.JobQueued}
	b.ResetTimer()
	for k := range b.N {
		if _, err := s.TransitionJob(b.Context(), int64(k+1), guard, assignTo("i")); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "transitions/s")
}

// BenchmarkJobTransitions assigns 100 jobs per TransitionJobs call.
func BenchmarkJobTransitions(b *testing.B) {
	s := benchStore(b)
	queuedJobs(b, s, b.N*batchSize)
	benchBatches(b, func(n int) domain.JobTransitionRequest {
		return domain.JobTransitionRequest{ID: int64(n + 1), Guard: domain.JobGuard{Status: domain.JobQueued}, Apply: assignTo("i")}
	}, s.TransitionJobs, func(r domain.JobTransitionResult) error { return r.Err })
}

// benchQueueRound sends n messages in one call, receives them in one call
// and deletes them in one call: three transactions.
func benchQueueRound(b *testing.B, q *Queue, msgs []domain.SendRequest) {
	ctx := b.Context()
	if err := q.Send(ctx, "bench", msgs); err != nil {
		b.Fatal(err)
	}
	got, err := q.Receive(ctx, "bench", len(msgs), time.Minute, 0)
	if err != nil || len(got) != len(msgs) {
		b.Fatalf("received %d of %d: %v", len(got), len(msgs), err)
	}
	receipts := make([]string, len(got))
	for k, m := range got {
		receipts[k] = m.Receipt
	}
	if err := q.Delete(ctx, "bench", receipts); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkQueueRound passes messages through send, receive and delete,
// in batches of 1000 and one at a time; messages/s counts each message
// once for its three steps.
func BenchmarkQueueRound(b *testing.B) {
	for _, size := range []int{1, 10, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			q := benchStore(b).Queue(QueueOptions{})
			msgs := make([]domain.SendRequest, size)
			for k := range msgs {
				msgs[k] = domain.SendRequest{Body: fmt.Appendf(nil, `{"job_id":%d,"pool":"linux"}`, 1_000_000+k)}
			}
			b.ResetTimer()
			for range b.N {
				benchQueueRound(b, q, msgs)
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "messages/s")
		})
	}
}

// BenchmarkQueueReceiveEmpty is an idle consumer's poll: it reads without
// taking the writer.
func BenchmarkQueueReceiveEmpty(b *testing.B) {
	q := benchStore(b).Queue(QueueOptions{})
	if err := q.Send(b.Context(), "bench", []domain.SendRequest{{Body: []byte("later"), Delay: MaxDelay}}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if got, err := q.Receive(b.Context(), "bench", 10, time.Minute, 0); err != nil || len(got) != 0 {
			b.Fatalf("got %d, %v", len(got), err)
		}
	}
}
