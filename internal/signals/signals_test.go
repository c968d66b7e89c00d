package signals

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
)

func TestWarmSignal(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewVirtual(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(ctx, t.TempDir()+"/s.db", clk)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := &Handler{Store: st, Clock: clk, Deadlines: domain.DefaultDeadlines(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Pool: func(name string) (domain.Pool, bool) {
			return domain.Pool{Name: name, HotIdleLifetime: 3 * time.Minute}, name == "p"
		}}
	rows := []domain.Instance{
		{ID: "hot", CloudID: "i-hot", Pool: "p", Role: domain.RoleHot, State: domain.StateBooting},
		{ID: "stopped", CloudID: "i-stopped", Pool: "p", Role: domain.RoleStopped, State: domain.StateBooting},
		{ID: "claimed", CloudID: "i-claimed", Pool: "p", Role: domain.RoleStopped, State: domain.StateClaimed, Job: "j"},
	}
	if err := st.CreateInstances(ctx, rows); err != nil {
		t.Fatal(err)
	}
	warm := func(id string) error { return h.Signal(ctx, domain.Signal{CloudID: id, Kind: domain.SignalWarm}) }

	if err := warm("i-unknown"); !errors.Is(err, ErrUnknownInstance) {
		t.Fatalf("unknown cloud id: %v", err)
	}
	for _, id := range []string{"i-hot", "i-stopped", "i-claimed"} {
		if err := warm(id); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	now := clk.Now()
	for id, want := range map[string]struct {
		state    domain.State
		deadline time.Time
	}{
		"hot":     {domain.StateReady, now.Add(3 * time.Minute)},
		"stopped": {domain.StateReady, now.Add(domain.DefaultDeadlines().Ready)},
		"claimed": {domain.StateClaimed, time.Time{}},
	} {
		got, _ := st.GetInstance(ctx, id)
		if got.State != want.state || (!want.deadline.IsZero() && !got.Deadline.Equal(want.deadline)) {
			t.Errorf("%s: state %s deadline %v, want %s %v", id, got.State, got.Deadline, want.state, want.deadline)
		}
	}
	if err := warm("i-hot"); err != nil {
		t.Fatalf("a repeated warm signal must be harmless: %v", err)
	}
	if err := h.Signal(ctx, domain.Signal{CloudID: "i-hot", Kind: "bogus"}); err == nil {
		t.Fatal("an unknown signal kind must be refused")
	}
}
