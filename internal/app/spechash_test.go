package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/converger"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// recordedStatuses stands for the pool statuses the converging replica
// writes to the shared store.
type recordedStatuses struct {
	list  []domain.PoolStatus
	err   error
	reads int
}

func (r *recordedStatuses) ListPoolStatus(context.Context) ([]domain.PoolStatus, error) {
	r.reads++
	return r.list, r.err
}

func TestAReplicaWithoutTheLeaseFollowsTheRecordedSpecHash(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	clk := clock.NewVirtual(t0)
	st := &recordedStatuses{}
	h := newSpecHashes(st, clk, slog.New(slog.NewTextHandler(io.Discard, nil)))

	// This replica converged once, then lost the lease.
	h.note(converger.Report{At: t0, Pools: []converger.PoolReport{{Pool: "p", SpecHash: "old"}}})
	if got := h.hash(t.Context(), "p"); got != "old" {
		t.Fatalf("hash after this replica's cycle = %q, want old", got)
	}
	// The replica holding the lease now rolls the pool to a new image.
	st.list = []domain.PoolStatus{{Name: "p", SpecHash: "new", LastCycle: t0.Add(90 * time.Second)}}
	clk.Advance(specHashRefresh)
	if got := h.hash(t.Context(), "p"); got != "new" {
		t.Errorf("hash once the store holds a later cycle = %q, want new", got)
	}
	reads := st.reads
	h.hash(t.Context(), "p")
	if st.reads != reads {
		t.Errorf("the store was read again within %v", specHashRefresh)
	}
}

func TestTheLaterCycleWinsAndAFailedReadKeepsWhatIsHeld(t *testing.T) {
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	clk := clock.NewVirtual(t0)
	st := &recordedStatuses{list: []domain.PoolStatus{{Name: "p", SpecHash: "recorded", LastCycle: t0}}}
	h := newSpecHashes(st, clk, slog.New(slog.NewTextHandler(io.Discard, nil)))

	// This replica's own cycle is later than what the store holds (its
	// write of the status failed, say): the cycle's hash stands.
	h.note(converger.Report{At: t0.Add(time.Minute), Pools: []converger.PoolReport{{Pool: "p", SpecHash: "mine"}}})
	if got := h.hash(t.Context(), "p"); got != "mine" {
		t.Errorf("hash = %q, want mine (the later cycle)", got)
	}
	st.err = errors.New("store unreachable")
	clk.Advance(specHashRefresh)
	if got := h.hash(t.Context(), "p"); got != "mine" {
		t.Errorf("hash after a failed read = %q, want mine", got)
	}
	if got := h.hash(t.Context(), "unknown"); got != "" {
		t.Errorf("hash of a pool never recorded = %q, want none", got)
	}
}
