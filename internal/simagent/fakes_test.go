package simagent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/simagent"
)

var epoch = time.Date(2026, 3, 29, 9, 0, 0, 0, time.UTC)

// at is an instant as an offset from epoch, for readable expectations.
func at(d time.Duration) time.Time { return epoch.Add(d) }

const sec = time.Second

// received is one call the control plane got.
type received struct {
	op       string // heartbeat, next, signal
	id       string
	at       time.Time // virtual time of the call
	sig      domain.Signal
	refused  bool
	answered domain.Instruction
}

// fakeAPI is a scriptable control plane. Next pops the machine's scripted
// instructions (wait when there are none); hooks run outside its lock.
type fakeAPI struct {
	clk *clock.Virtual

	mu       sync.Mutex
	calls    []received
	next     map[string][]domain.Instruction
	refuse   map[domain.SignalKind]int // refuse the next n signals of a kind; -1 forever
	failNext int                       // fail the next n Next calls
	onSignal func(domain.Signal)       // after an accepted signal
	onNext   func(id string, ins domain.Instruction)
}

func newFakeAPI(clk *clock.Virtual) *fakeAPI {
	return &fakeAPI{clk: clk, next: map[string][]domain.Instruction{}, refuse: map[domain.SignalKind]int{}}
}

var errRefused = errors.New("control plane says no")

func (f *fakeAPI) Heartbeat(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, received{op: "heartbeat", id: id, at: f.clk.Now()})
	return nil
}

func (f *fakeAPI) Signal(_ context.Context, s domain.Signal) error {
	f.mu.Lock()
	r := received{op: "signal", id: s.CloudID, at: f.clk.Now(), sig: s}
	if n := f.refuse[s.Kind]; n != 0 {
		r.refused = true
		if n > 0 {
			f.refuse[s.Kind]--
		}
	}
	f.calls = append(f.calls, r)
	hook := f.onSignal
	f.mu.Unlock()
	if r.refused {
		return errRefused
	}
	if hook != nil {
		hook(s)
	}
	return nil
}

func (f *fakeAPI) Next(_ context.Context, id string) (domain.Instruction, error) {
	f.mu.Lock()
	r := received{op: "next", id: id, at: f.clk.Now()}
	var err error
	if f.failNext > 0 {
		f.failNext--
		r.refused, err = true, errRefused
	} else if q := f.next[id]; len(q) > 0 {
		r.answered, f.next[id] = q[0], q[1:]
	} else {
		r.answered = domain.Instruction{Kind: domain.InstructionWait}
	}
	f.calls = append(f.calls, r)
	hook := f.onNext
	f.mu.Unlock()
	if hook != nil && err == nil {
		hook(id, r.answered)
	}
	return r.answered, err
}

// push scripts the next instruction for a machine.
func (f *fakeAPI) push(id string, ins domain.Instruction) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next[id] = append(f.next[id], ins)
}

func (f *fakeAPI) setRefuse(kind domain.SignalKind, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse[kind] = n
}

// of returns the calls of one op (all ops when op is empty) for a machine.
func (f *fakeAPI) of(id, op string) []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []received
	for _, r := range f.calls {
		if r.id == id && (op == "" || r.op == op) {
			out = append(out, r)
		}
	}
	return out
}

// times returns the virtual times of a machine's calls of op.
func (f *fakeAPI) times(id, op string) []time.Time {
	var out []time.Time
	for _, r := range f.of(id, op) {
		out = append(out, r.at)
	}
	return out
}

// signals renders a machine's signal attempts as "kind@offset[job][reason]"
// with "!" for a refused one; the signal's At must equal the time it
// arrived.
func (f *fakeAPI) signals(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	for _, r := range f.of(id, "signal") {
		if !r.sig.At.Equal(r.at) {
			t.Fatalf("signal %s stamped %v, sent at %v", r.sig.Kind, r.sig.At, r.at)
		}
		s := fmt.Sprintf("%s@%s", r.sig.Kind, r.at.Sub(epoch))
		if r.sig.Job != "" {
			s += " job=" + r.sig.Job
		}
		if r.sig.Reason != "" {
			s += " reason=" + r.sig.Reason
		}
		if r.refused {
			s += " !"
		}
		out = append(out, s)
	}
	return out
}

// hostRun is one RunJIT call.
type hostRun struct {
	ctx     context.Context
	jit     string
	at      time.Time
	onStart func(int64)
	onDone  func(int64, string)
}

// fakeHost is GitHub's runner service: it records RunJIT calls and leaves
// it to the test to start and finish jobs, unless onRun does.
type fakeHost struct {
	clk *clock.Virtual

	mu     sync.Mutex
	runs   []*hostRun
	refuse map[string]bool // JIT configs GitHub refuses
	onRun  func(*hostRun)  // called inside RunJIT
}

func newFakeHost(clk *clock.Virtual) *fakeHost {
	return &fakeHost{clk: clk, refuse: map[string]bool{}}
}

func (h *fakeHost) RunJIT(ctx context.Context, jit string, onStart func(int64), onDone func(int64, string)) error {
	h.mu.Lock()
	r := &hostRun{ctx: ctx, jit: jit, at: h.clk.Now(), onStart: onStart, onDone: onDone}
	if h.refuse[jit] {
		h.mu.Unlock()
		return errors.New("invalid jit config")
	}
	h.runs = append(h.runs, r)
	hook := h.onRun
	h.mu.Unlock()
	if hook != nil {
		hook(r)
	}
	return nil
}

func (h *fakeHost) all() []*hostRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.runs)
}

// world is a simulated cloud whose machines run the fleet's agents.
type world struct {
	clk   *clock.Virtual
	cloud *sim.Cloud
	api   *fakeAPI
	host  *fakeHost
	fleet *simagent.Fleet
}

func newWorld(t *testing.T, lat sim.Latency, opts simagent.Options) *world {
	t.Helper()
	clk := clock.NewVirtual(epoch)
	w := &world{clk: clk, api: newFakeAPI(clk), host: newFakeHost(clk)}
	w.fleet = simagent.New(clk, w.api, w.host, opts)
	w.cloud = sim.New(clk, sim.Options{Seed: 1, Latency: lat, Lifecycle: w.fleet})
	t.Cleanup(func() {
		w.cloud.Close()
		w.fleet.Close()
		clk.Settle()
	})
	return w
}

func (w *world) create(t *testing.T, n int) []string {
	t.Helper()
	ms, err := w.cloud.Create(t.Context(), domain.LaunchSpec{ImageID: "ami-1", Count: n})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	w.clk.Settle()
	return ids
}

// advanceTo lets time pass until the offset from epoch.
func (w *world) advanceTo(d time.Duration) { w.clk.Pass(at(d).Sub(w.clk.Now())) }

// act runs f now, as a control plane or GitHub would, and settles.
func (w *world) act(f func()) {
	f()
	w.clk.Settle()
}

// assign gives id's agent job as the control plane does: the instruction,
// then the notice. Outside the clock's callbacks it goes through act.
func (w *world) assign(id string, job int64) {
	w.api.push(id, run(job))
	w.fleet.Assigned(id)
}

func run(job int64) domain.Instruction {
	return domain.Instruction{Kind: domain.InstructionRun, Assignment: domain.Assignment{
		JobID: job, RunnerName: fmt.Sprintf("runner-%d", job), JITConfig: fmt.Sprintf("jit-%d", job),
	}}
}

var release = domain.Instruction{Kind: domain.InstructionRelease}

// every lists the instants from first to last, step apart.
func every(first, last, step time.Duration) []time.Time {
	var out []time.Time
	for d := first; d <= last; d += step {
		out = append(out, at(d))
	}
	return out
}

func wantTimes(t *testing.T, what string, got, want []time.Time) {
	t.Helper()
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Fatalf("%s at %v, want %v", what, offsets(got), offsets(want))
	}
}

func offsets(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, tm := range ts {
		out[i] = tm.Sub(epoch).String()
	}
	return out
}

func wantSignals(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("signals\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
