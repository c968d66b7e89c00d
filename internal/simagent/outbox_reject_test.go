package simagent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// rejectingAPI refuses every registered signal for good and counts calls.
type rejectingAPI struct {
	mu      sync.Mutex
	signals map[domain.SignalKind]int
	next    int
}

func (r *rejectingAPI) Signal(_ context.Context, s domain.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.signals[s.Kind]++
	if s.Kind == domain.SignalRegistered {
		return fmt.Errorf("registered for another job: %w", domain.ErrRejected)
	}
	return nil
}
func (r *rejectingAPI) Heartbeat(context.Context, string) error { return nil }
func (r *rejectingAPI) Next(context.Context, string) (domain.Instruction, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	if r.next == 1 {
		return domain.Instruction{Kind: domain.InstructionRun, Assignment: domain.Assignment{JobID: 1, JITConfig: "x"}}, nil
	}
	return domain.Instruction{Kind: domain.InstructionWait}, nil
}

type idleHost struct{}

func (idleHost) RunJIT(context.Context, string, func(int64), func(int64, string)) error { return nil }

func TestRejectedSignalIsDroppedNotRetried(t *testing.T) {
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	api := &rejectingAPI{signals: map[domain.SignalKind]int{}}
	f := New(clk, api, idleHost{}, Options{RegisterDelay: -1, PollEvery: time.Minute})
	defer f.Close()
	f.Running(domain.CloudInstance{ID: "i-1", State: domain.CloudRunning}, clk.Now())
	for range 10 {
		clk.Advance(10 * time.Second)
		clk.Settle()
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if got := api.signals[domain.SignalRegistered]; got != 1 {
		t.Fatalf("registered sent %d times; a rejected signal must not be retried", got)
	}
	if st := f.Stats(); st.Rejected[domain.SignalRegistered] != 1 {
		t.Fatalf("stats %+v", st)
	}
	if api.next < 2 {
		t.Fatal("after a rejection the agent must ask what to do next")
	}
}

// countingAPI accepts everything and records when warm signals arrive.
type countingAPI struct {
	mu    sync.Mutex
	warms []time.Time
}

func (c *countingAPI) Signal(_ context.Context, s domain.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.Kind == domain.SignalWarm {
		c.warms = append(c.warms, s.At)
	}
	return nil
}
func (c *countingAPI) Heartbeat(context.Context, string) error { return nil }
func (c *countingAPI) Next(context.Context, string) (domain.Instruction, error) {
	return domain.Instruction{Kind: domain.InstructionWait}, nil
}

func TestRestartWarmUpAppliesAfterTheFirstRun(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewVirtual(start)
	api := &countingAPI{}
	f := New(clk, api, idleHost{}, Options{WarmUp: 30 * time.Second, RestartWarmUp: 3 * time.Second, PollEvery: time.Hour})
	defer f.Close()
	f.Running(domain.CloudInstance{ID: "i-1"}, start)
	clk.Pass(time.Minute)
	f.Halted("i-1", clk.Now())
	restart := clk.Now()
	f.Running(domain.CloudInstance{ID: "i-1"}, restart)
	clk.Pass(time.Minute)
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.warms) != 2 || !api.warms[0].Equal(start.Add(30*time.Second)) || !api.warms[1].Equal(restart.Add(3*time.Second)) {
		t.Fatalf("warm signals at %v", api.warms)
	}
}
