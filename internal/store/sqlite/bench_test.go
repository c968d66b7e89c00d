package sqlite

import (
	"fmt"
	"testing"

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

// BenchmarkTransitionBatch claims 100 instances per TransitionBatch call.
func BenchmarkTransitionBatch(b *testing.B) {
	const batch = 100
	s := benchStore(b)
	ids := readyInstances(b, s, b.N*batch)
	reqs := make([]domain.TransitionRequest, batch)
	b.ResetTimer()
	for k := range b.N {
		for j := range reqs {
			reqs[j] = domain.TransitionRequest{ID: ids[k*batch+j], Guard: domain.Guard{State: domain.StateReady}, Apply: claimFor("job")}
		}
		results, err := s.TransitionBatch(b.Context(), reqs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range results {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "transitions/s")
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
