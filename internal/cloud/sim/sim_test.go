package sim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/cloudtest"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

var epoch = time.Date(2026, 3, 29, 9, 0, 0, 0, time.UTC)

func TestContract(t *testing.T) {
	cloudtest.Run(t, func(t *testing.T) domain.Cloud {
		return sim.New(clock.NewVirtual(epoch), sim.Options{})
	})
}

func TestContractWithSignalsAndCapacity(t *testing.T) {
	cloudtest.Run(t, func(t *testing.T) domain.Cloud {
		c := sim.New(clock.NewVirtual(epoch), sim.Options{
			Capacity: 500,
			Signals:  newSink(0),
			Images:   map[string]string{cloudtest.Image: "ami-0123456789abcdef0"},
		})
		t.Cleanup(c.Close)
		return c
	})
}

func newSim(t *testing.T, opts sim.Options) (*sim.Cloud, *clock.Virtual) {
	t.Helper()
	clk := clock.NewVirtual(epoch)
	c := sim.New(clk, opts)
	t.Cleanup(c.Close)
	return c, clk
}

func create(t *testing.T, c *sim.Cloud, n int, tags map[string]string) []string {
	t.Helper()
	ms, err := c.Create(t.Context(), domain.LaunchSpec{ImageID: "ami-1", Count: n, Tags: tags})
	if err != nil {
		t.Fatalf("Create %d: %v", n, err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

func stateOf(t *testing.T, c *sim.Cloud, id string) domain.CloudState {
	t.Helper()
	m, ok := c.Get(id)
	if !ok {
		t.Fatalf("%s unknown", id)
	}
	return m.State
}

func wantState(t *testing.T, c *sim.Cloud, id string, want domain.CloudState) {
	t.Helper()
	if got := stateOf(t, c, id); got != want {
		t.Fatalf("%s is %s, want %s", id, got, want)
	}
}

// wantRefused fails unless err names exactly ids as refused with code,
// reads as neither an invalid request nor an unknown machine, and says
// why.
func wantRefused(t *testing.T, err error, code string, ids ...string) {
	t.Helper()
	r, ok := errors.AsType[*domain.RefusedInstancesError](err)
	if !ok || !slices.Equal(r.IDs, ids) || r.Code != code || r.Reason == "" || codeOf(err) != code ||
		errors.Is(err, domain.ErrInvalidRequest) || errors.Is(err, domain.ErrUnknownInstance) {
		t.Fatalf("error %v, want %s refusing %v", err, code, ids)
	}
}

func codeOf(err error) string {
	if ce, ok := errors.AsType[*domain.CloudError](err); ok {
		return ce.Code
	}
	return ""
}

// A machine protected from termination is refused by name, as on EC2; the
// rest of its batch is terminated, and it is once the protection is off.
func TestTerminationProtectionRefusesOnlyTheProtectedMachine(t *testing.T) {
	c, clk := newSim(t, sim.Options{Latency: latency})
	ctx := t.Context()
	ids := create(t, c, 3, nil)
	clk.Advance(latency.Boot)
	if !c.Protect(ids[1], true) || c.Protect("i-0000000000000dead", true) {
		t.Fatal("Protect does not report which machines it knows")
	}
	err := c.Terminate(ctx, append(ids, "i-0000000000000dead"))
	wantRefused(t, err, sim.CodeNotPermitted, ids[1])
	if got := domain.UnknownIDs(err); len(got) != 1 || got[0] != "i-0000000000000dead" || domain.TerminateDone(err) {
		t.Fatalf("unknown %v, done %t; want the unknown id named and the terminate not done", got, domain.TerminateDone(err))
	}
	wantState(t, c, ids[0], domain.CloudShuttingDown)
	wantState(t, c, ids[1], domain.CloudRunning)
	wantState(t, c, ids[2], domain.CloudShuttingDown)
	c.Protect(ids[1], false)
	if err := c.Terminate(ctx, ids); err != nil {
		t.Fatal(err)
	}
	wantState(t, c, ids[1], domain.CloudShuttingDown)
}

var latency = sim.Latency{
	Boot: 30 * time.Second, Start: 20 * time.Second,
	Stop: 10 * time.Second, Terminate: 5 * time.Second,
}

func TestTransitionsHappenAtExactVirtualTimes(t *testing.T) {
	c, clk := newSim(t, sim.Options{Latency: latency})
	ctx := t.Context()
	id := create(t, c, 1, map[string]string{"k": "v"})[0]

	steps := []struct {
		action func() error
		before domain.CloudState
		after  domain.CloudState
		wait   time.Duration
	}{
		{nil, domain.CloudPending, domain.CloudRunning, latency.Boot},
		{func() error { return c.Stop(ctx, []string{id}) }, domain.CloudStopping, domain.CloudStopped, latency.Stop},
		{func() error { return c.Start(ctx, []string{id}) }, domain.CloudPending, domain.CloudRunning, latency.Start},
		{func() error { return c.Terminate(ctx, []string{id}) }, domain.CloudShuttingDown, domain.CloudTerminated, latency.Terminate},
	}
	for i, s := range steps {
		if s.action != nil {
			if err := s.action(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		wantState(t, c, id, s.before)
		clk.Advance(s.wait - time.Nanosecond)
		wantState(t, c, id, s.before)
		clk.Advance(time.Nanosecond)
		wantState(t, c, id, s.after)
	}
	if m, _ := c.Get(id); !m.LaunchedAt.Equal(epoch.Add(latency.Boot + latency.Stop)) {
		t.Errorf("LaunchedAt %v, want the last start", m.LaunchedAt)
	}
}

func TestTerminatedMachinesAreListedByIDForAWhile(t *testing.T) {
	c, clk := newSim(t, sim.Options{TerminatedRetention: time.Hour})
	ctx := t.Context()
	tags := map[string]string{"k": "v"}
	ids := create(t, c, 2, tags)
	if err := c.Terminate(ctx, ids[:1]); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.List(ctx, domain.CloudFilter{Tags: tags}); len(got) != 1 || got[0].ID != ids[1] {
		t.Fatalf("tag listing %v, want only %s", got, ids[1])
	}
	if got, _ := c.List(ctx, domain.CloudFilter{}); len(got) != 1 {
		t.Fatalf("unfiltered listing has %d machines, want 1", len(got))
	}
	clk.Advance(time.Hour - time.Nanosecond)
	if got, err := c.List(ctx, domain.CloudFilter{IDs: ids[:1]}); err != nil || got[0].State != domain.CloudTerminated {
		t.Fatalf("by id: %v, %v", got, err)
	}
	clk.Advance(time.Nanosecond)
	_, err := c.List(ctx, domain.CloudFilter{IDs: ids[:1]})
	cloudtest.WantCode(t, err, domain.ErrUnknownInstance, sim.CodeNotFound)
	if len(c.Instances()) != 1 {
		t.Fatalf("Instances() = %v", c.Instances())
	}
}

// machineIn brings a fresh machine into state, with every latency 10 s.
func machineIn(t *testing.T, state domain.CloudState) (*sim.Cloud, string) {
	t.Helper()
	const d = 10 * time.Second
	c, clk := newSim(t, sim.Options{Latency: sim.Latency{Boot: d, Start: d, Stop: d, Terminate: d}})
	ctx := t.Context()
	id := create(t, c, 1, nil)[0]
	ops := map[domain.CloudState][]func(){
		domain.CloudPending:      {},
		domain.CloudRunning:      {func() { clk.Advance(d) }},
		domain.CloudStopping:     {func() { clk.Advance(d) }, func() { _ = c.Stop(ctx, []string{id}) }},
		domain.CloudStopped:      {func() { clk.Advance(d) }, func() { _ = c.Stop(ctx, []string{id}) }, func() { clk.Advance(d) }},
		domain.CloudShuttingDown: {func() { _ = c.Terminate(ctx, []string{id}) }},
		domain.CloudTerminated:   {func() { _ = c.Terminate(ctx, []string{id}) }, func() { clk.Advance(d) }},
	}
	for _, op := range ops[state] {
		op()
	}
	wantState(t, c, id, state)
	return c, id
}

// A state a call cannot change is refused, as on EC2; a machine refused
// so that is terminated or shutting down is gone for the caller, as
// bullpen's EC2 provider reports it: named as unknown.
func TestStateChangeRulesFollowEC2(t *testing.T) {
	const refused, gone = domain.CloudState("refused"), domain.CloudState("gone")
	type call = func(*sim.Cloud, context.Context, []string) error
	start, stop, term := call((*sim.Cloud).Start), call((*sim.Cloud).Stop), call((*sim.Cloud).Terminate)
	tests := []struct {
		from domain.CloudState
		op   string
		call call
		want domain.CloudState
	}{
		{domain.CloudPending, "start", start, domain.CloudPending},
		{domain.CloudRunning, "start", start, domain.CloudRunning},
		{domain.CloudStopping, "start", start, refused},
		{domain.CloudStopped, "start", start, domain.CloudPending},
		{domain.CloudShuttingDown, "start", start, gone},
		{domain.CloudTerminated, "start", start, gone},
		{domain.CloudPending, "stop", stop, refused},
		{domain.CloudRunning, "stop", stop, domain.CloudStopping},
		{domain.CloudStopping, "stop", stop, domain.CloudStopping},
		{domain.CloudStopped, "stop", stop, domain.CloudStopped},
		{domain.CloudShuttingDown, "stop", stop, gone},
		{domain.CloudTerminated, "stop", stop, gone},
		{domain.CloudPending, "terminate", term, domain.CloudShuttingDown},
		{domain.CloudRunning, "terminate", term, domain.CloudShuttingDown},
		{domain.CloudStopping, "terminate", term, domain.CloudShuttingDown},
		{domain.CloudStopped, "terminate", term, domain.CloudShuttingDown},
		{domain.CloudShuttingDown, "terminate", term, domain.CloudShuttingDown},
		{domain.CloudTerminated, "terminate", term, domain.CloudTerminated},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %s", tt.op, tt.from), func(t *testing.T) {
			c, id := machineIn(t, tt.from)
			err := tt.call(c, t.Context(), []string{id})
			switch tt.want {
			case refused:
				wantRefused(t, err, sim.CodeIncorrectState, id)
				wantState(t, c, id, tt.from)
				return
			case gone:
				cloudtest.WantCode(t, err, domain.ErrUnknownInstance, sim.CodeIncorrectState)
				if got := domain.UnknownIDs(err); len(got) != 1 || got[0] != id {
					t.Fatalf("unknown %v, want %s", got, id)
				}
				wantState(t, c, id, tt.from)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantState(t, c, id, tt.want)
		})
	}
}

// A machine in a state a batch refuses fails the whole EC2 call: it is
// taken out and the call made on the rest, as bullpen's EC2 provider does,
// and named as refused; an unknown id is skipped and the rest goes on, as
// every provider does.
func TestBatchRefusalsAndUnknownIDs(t *testing.T) {
	c, clk := newSim(t, sim.Options{Latency: latency})
	ctx := t.Context()
	running := create(t, c, 2, nil)
	clk.Advance(latency.Boot)
	pending := create(t, c, 1, nil)[0]

	err := c.Stop(ctx, append([]string{pending}, running...))
	wantRefused(t, err, sim.CodeIncorrectState, pending)
	wantState(t, c, pending, domain.CloudPending)
	for _, id := range running {
		wantState(t, c, id, domain.CloudStopping)
	}
	if n := c.Calls()[sim.OpStopInstances]; n != 2 {
		t.Fatalf("%d stop calls; want the refused one and one without the pending machine", n)
	}
	err = c.Tag(ctx, []string{running[0], "i-nope"}, map[string]string{"a": "b"})
	cloudtest.WantCode(t, err, domain.ErrUnknownInstance, sim.CodeNotFound)
	if m, _ := c.Get(running[0]); m.Tags["a"] != "b" {
		t.Fatalf("%s was not tagged beside an unknown id", running[0])
	}
	err = c.Stop(ctx, append(running, "i-0000000000000dead"))
	cloudtest.WantCode(t, err, domain.ErrUnknownInstance, sim.CodeNotFound)
	for _, id := range running {
		wantState(t, c, id, domain.CloudStopping)
	}
}

func TestBatchArgumentsAreChecked(t *testing.T) {
	c, _ := newSim(t, sim.Options{MaxPerCall: 3})
	ctx := t.Context()
	ids := create(t, c, 3, nil)
	cloudtest.WantCode(t, c.Stop(ctx, nil), domain.ErrInvalidRequest, sim.CodeMissingParameter)
	cloudtest.WantCode(t, c.Tag(ctx, ids, nil), domain.ErrInvalidRequest, sim.CodeMissingParameter)
	cloudtest.WantCode(t, c.Terminate(ctx, append(ids, ids[0])), domain.ErrInvalidRequest, sim.CodeInvalidParameter)
	wantState(t, c, ids[0], domain.CloudRunning)
	// Duplicates within the limit are one id, as on EC2.
	if err := c.Terminate(ctx, []string{ids[0], ids[0]}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Create(ctx, domain.LaunchSpec{ImageID: "ami-1", Count: 4})
	cloudtest.WantCode(t, err, domain.ErrInvalidRequest, sim.CodeInvalidParameter)
	_, err = c.Create(ctx, domain.LaunchSpec{ImageID: "ami-1"})
	cloudtest.WantCode(t, err, domain.ErrInvalidRequest, sim.CodeInvalidParameter)
}

func TestCallCountersAndMaxIDsPerCall(t *testing.T) {
	c, _ := newSim(t, sim.Options{})
	ctx := t.Context()
	ids := create(t, c, 120, nil)
	for _, chunk := range domain.Chunk(ids, domain.MaxBatch) {
		if err := c.Stop(ctx, chunk); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Start(ctx, []string{"i-unknown"}) // failed calls count too
	_ = c.Terminate(ctx, make([]string, 1001))
	if _, err := c.List(ctx, domain.CloudFilter{IDs: ids[:7]}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResolveImage(ctx, "ubuntu", domain.RunnerSpec{}); err != nil {
		t.Fatal(err)
	}
	_ = c.Tag(ctx, ids[:2], map[string]string{"a": "b"})
	wantCalls := map[string]int{
		sim.OpCreateFleet: 1, sim.OpStopInstances: 3, sim.OpStartInstances: 1,
		sim.OpTerminateInstances: 1, sim.OpDescribeInstances: 1, sim.OpDescribeImages: 1, sim.OpCreateTags: 1,
	}
	wantMax := map[string]int{
		sim.OpCreateFleet: 120, sim.OpStopInstances: 50, sim.OpStartInstances: 1,
		sim.OpTerminateInstances: 1001, sim.OpDescribeInstances: 7, sim.OpDescribeImages: 1, sim.OpCreateTags: 2,
	}
	calls, maxIDs := c.Calls(), c.MaxIDsPerCall()
	for op := range wantCalls {
		if calls[op] != wantCalls[op] || maxIDs[op] != wantMax[op] {
			t.Errorf("%s: %d calls, max %d ids; want %d, %d", op, calls[op], maxIDs[op], wantCalls[op], wantMax[op])
		}
	}
	calls[sim.OpCreateFleet] = 99 // a copy
	c.ResetCalls()
	if len(c.Calls()) != 0 || len(c.MaxIDsPerCall()) != 0 {
		t.Fatalf("after reset: %v %v", c.Calls(), c.MaxIDsPerCall())
	}
}

func TestCancelledContextIsNotACall(t *testing.T) {
	c, _ := newSim(t, sim.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.List(ctx, domain.CloudFilter{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("List with a cancelled context: %v", err)
	}
	if n := c.Calls()[sim.OpDescribeInstances]; n != 0 {
		t.Fatalf("counted %d calls", n)
	}
}

func TestConcurrentUse(t *testing.T) {
	s := newSink(0)
	c, clk := newSim(t, sim.Options{Latency: latency, Signals: s, Capacity: 200, NeverWarmEvery: 5})
	ctx := t.Context()
	c.Throttle(sim.OpDescribeInstances, 1000, 50)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			tags := map[string]string{"worker": fmt.Sprint(w)}
			for range 20 {
				ms, _ := c.Create(ctx, domain.LaunchSpec{ImageID: "ami-1", Count: 3, Tags: tags})
				ids := make([]string, len(ms))
				for i, m := range ms {
					ids[i] = m.ID
				}
				_, _ = c.List(ctx, domain.CloudFilter{Tags: tags})
				if len(ids) > 0 {
					_ = c.Tag(ctx, ids, map[string]string{"seen": "yes"})
					_ = c.Stop(ctx, ids)
					_ = c.Start(ctx, ids)
					_ = c.Terminate(ctx, ids[:1])
				}
				_ = c.Calls()
				_ = c.Instances()
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			clk.Advance(time.Second)
		}
	})
	wg.Wait()
	if got := c.Calls()[sim.OpCreateFleet]; got != 160 {
		t.Fatalf("%d CreateFleet calls, want 160", got)
	}
}
