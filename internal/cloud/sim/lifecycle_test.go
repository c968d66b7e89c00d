package sim_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/cloudtest"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// notice is one Lifecycle call as the recorder saw it.
type notice struct {
	running bool
	id      string
	at      time.Time
	state   domain.CloudState // the state Running was given
	current domain.CloudState // what the cloud described during the call
}

func (n notice) String() string {
	kind := "halted"
	if n.running {
		kind = "running"
	}
	return fmt.Sprintf("%s %s at %s", kind, n.id, n.at.Sub(epoch))
}

// recorder records Lifecycle calls. With a cloud set, it reads the machine
// back during each call, which deadlocks if the sim calls with its lock held.
type recorder struct {
	mu      sync.Mutex
	cloud   *sim.Cloud
	notices []notice
	active  int // calls in progress, to catch concurrent delivery
	overlap bool
}

func (r *recorder) Running(m domain.CloudInstance, at time.Time) {
	r.record(notice{running: true, id: m.ID, at: at, state: m.State})
}

func (r *recorder) Halted(id string, at time.Time) { r.record(notice{id: id, at: at}) }

func (r *recorder) record(n notice) {
	r.mu.Lock()
	r.active++
	r.overlap = r.overlap || r.active > 1
	c := r.cloud
	r.mu.Unlock()
	if c != nil {
		if m, ok := c.Get(n.id); ok {
			n.current = m.State
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active--
	r.notices = append(r.notices, n)
}

// take returns the notices recorded since the last take.
func (r *recorder) take() []notice {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.notices
	r.notices = nil
	return out
}

func newLifecycleSim(t *testing.T, lat sim.Latency) (*sim.Cloud, *clock.Virtual, *recorder) {
	t.Helper()
	rec := &recorder{}
	c, clk := newSim(t, sim.Options{Latency: lat, Lifecycle: rec})
	rec.mu.Lock()
	rec.cloud = c
	rec.mu.Unlock()
	return c, clk, rec
}

func running(id string, at time.Time) notice { return notice{running: true, id: id, at: at} }
func halted(id string, at time.Time) notice  { return notice{id: id, at: at} }

// wantNotices compares kind, machine and instant, in order.
func wantNotices(t *testing.T, got []notice, want ...notice) {
	t.Helper()
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		same = got[i].running == want[i].running && got[i].id == want[i].id && got[i].at.Equal(want[i].at)
	}
	if !same {
		t.Fatalf("notices %v, want %v", got, want)
	}
}

func TestLifecycleFollowsBootStopStartTerminate(t *testing.T) {
	lat := sim.Latency{Boot: 30 * time.Second, Start: 20 * time.Second, Stop: 10 * time.Second, Terminate: 5 * time.Second}
	c, clk, rec := newLifecycleSim(t, lat)
	ctx := t.Context()
	id := create(t, c, 1, map[string]string{"pool": "p"})[0]

	wantNextTimer(t, clk.Next, epoch.Add(lat.Boot))
	clk.AdvanceTo(epoch.Add(lat.Boot - time.Nanosecond))
	clk.Settle()
	wantNotices(t, rec.take())
	clk.Advance(time.Nanosecond)
	clk.Settle()
	got := rec.take()
	wantNotices(t, got, running(id, epoch.Add(lat.Boot)))
	if got[0].state != domain.CloudRunning || got[0].current != domain.CloudRunning {
		t.Fatalf("Running got a %s machine, the cloud described it %s", got[0].state, got[0].current)
	}
	if clk.Pending() != 0 {
		t.Fatalf("%d timers pending on a running machine", clk.Pending())
	}

	clk.Advance(time.Minute)
	stoppedAt := clk.Now()
	if err := c.Stop(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	clk.Settle()
	wantNotices(t, rec.take(), halted(id, stoppedAt))

	clk.Advance(lat.Stop)
	startedAt := clk.Now()
	if err := c.Start(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(lat.Start)
	clk.Settle()
	wantNotices(t, rec.take(), running(id, startedAt.Add(lat.Start)))

	clk.Advance(time.Minute)
	endAt := clk.Now()
	if err := c.Terminate(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	clk.Settle()
	wantNotices(t, rec.take(), halted(id, endAt))
	if clk.Pending() != 0 {
		t.Fatalf("%d timers pending after terminate", clk.Pending())
	}
}

func TestLifecycleAtCreationWithoutBootLatency(t *testing.T) {
	c, clk, rec := newLifecycleSim(t, sim.Latency{})
	ids := create(t, c, 3, nil)
	clk.Settle()
	wantNotices(t, rec.take(), running(ids[0], epoch), running(ids[1], epoch), running(ids[2], epoch))
}

func TestLifecycleAnnouncesOneInstantInCreationOrder(t *testing.T) {
	c, clk, rec := newLifecycleSim(t, sim.Latency{Boot: 10 * time.Second, Start: 5 * time.Second})
	first := create(t, c, 4, nil)
	clk.Advance(10 * time.Second)
	clk.Settle()
	wantNotices(t, rec.take(), running(first[0], epoch.Add(10*time.Second)), running(first[1], epoch.Add(10*time.Second)),
		running(first[2], epoch.Add(10*time.Second)), running(first[3], epoch.Add(10*time.Second)))
	if err := c.Stop(t.Context(), first[:2]); err != nil {
		t.Fatal(err)
	}
	clk.Settle()
	rec.take()

	// Machines reaching running at one instant share one timer and are
	// announced in creation order, whatever the order of the calls was.
	second := create(t, c, 2, nil) // due at +20s
	clk.Advance(5 * time.Second)
	if err := c.Start(t.Context(), []string{first[1], first[0]}); err != nil { // due at +20s
		t.Fatal(err)
	}
	if clk.Pending() != 1 {
		t.Fatalf("%d timers pending, want one for the instant", clk.Pending())
	}
	clk.Advance(5 * time.Second)
	clk.Settle()
	at := epoch.Add(20 * time.Second)
	wantNotices(t, rec.take(), running(first[0], at), running(first[1], at), running(second[0], at), running(second[1], at))
}

func TestLifecycleSilentForMachinesThatNeverRan(t *testing.T) {
	c, clk, rec := newLifecycleSim(t, sim.Latency{Boot: time.Minute})
	ids := create(t, c, 2, nil)
	clk.Advance(30 * time.Second)
	if err := c.Terminate(t.Context(), ids[:1]); err != nil {
		t.Fatal(err)
	}
	if clk.Pending() != 1 {
		t.Fatalf("%d timers pending, want the survivor's", clk.Pending())
	}
	if err := c.Terminate(t.Context(), ids[1:]); err != nil {
		t.Fatal(err)
	}
	if clk.Pending() != 0 {
		t.Fatalf("%d timers pending, want none", clk.Pending())
	}
	clk.Advance(time.Hour)
	clk.Settle()
	wantNotices(t, rec.take())
}

// A stop at the very instant a machine reaches running, before the clock's
// callback announcing it has run, still gives Running before Halted.
func TestLifecycleHaltRacingTheAnnouncement(t *testing.T) {
	for range 50 {
		c, clk, rec := newLifecycleSim(t, sim.Latency{Boot: 10 * time.Second})
		id := create(t, c, 1, nil)[0]
		clk.Advance(10 * time.Second)
		if err := c.Terminate(t.Context(), []string{id}); err != nil {
			t.Fatal(err)
		}
		clk.Settle()
		at := epoch.Add(10 * time.Second)
		wantNotices(t, rec.take(), running(id, at), halted(id, at))
		c.Close()
	}
}

func TestLifecycleReplacesTheWarmAgent(t *testing.T) {
	s := newSink(0)
	rec := &recorder{}
	c, clk := newSim(t, sim.Options{Latency: sim.Latency{Boot: time.Second, WarmUp: time.Second}, Signals: s, Lifecycle: rec})
	id := create(t, c, 1, nil)[0]
	clk.Advance(time.Hour)
	clk.Settle()
	wantNotices(t, rec.take(), running(id, epoch.Add(time.Second)))
	if len(s.attempts) != 0 || clk.Pending() != 0 {
		t.Fatalf("built-in agent still active: %d signals, %d timers", len(s.attempts), clk.Pending())
	}
}

func TestLifecycleCloseHaltsRunningMachines(t *testing.T) {
	c, clk, rec := newLifecycleSim(t, sim.Latency{Boot: 10 * time.Second})
	ids := create(t, c, 2, nil)
	clk.Advance(10 * time.Second)
	pending := create(t, c, 1, nil)
	clk.Settle()
	rec.take()

	clk.Advance(time.Second)
	c.Close()
	clk.Settle()
	at := epoch.Add(11 * time.Second)
	wantNotices(t, rec.take(), halted(ids[0], at), halted(ids[1], at))
	if clk.Pending() != 0 {
		t.Fatalf("%d timers pending after Close", clk.Pending())
	}
	if err := c.Stop(t.Context(), ids); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if err := c.Start(t.Context(), ids); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	clk.Settle()
	wantNotices(t, rec.take())
	wantState(t, c, pending[0], domain.CloudRunning)
}

func TestLifecycleContract(t *testing.T) {
	cloudtest.Run(t, func(t *testing.T) domain.Cloud {
		c := sim.New(clock.NewVirtual(epoch), sim.Options{Lifecycle: &recorder{}})
		t.Cleanup(c.Close)
		return c
	})
}

// Concurrent starts, stops and terminates while the clock moves: every
// machine's notices alternate Running, Halted, in time order, and calls never
// overlap.
func TestLifecycleConcurrentOrderPerMachine(t *testing.T) {
	lat := sim.Latency{Boot: 3 * time.Second, Start: 2 * time.Second, Stop: time.Second, Terminate: time.Second}
	c, clk, rec := newLifecycleSim(t, lat)
	ids := create(t, c, 40, nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 200 {
				id := ids[rng.IntN(len(ids))]
				switch rng.IntN(5) {
				case 0, 1:
					_ = c.Stop(t.Context(), []string{id}) // may be refused: not running
				case 2, 3:
					_ = c.Start(t.Context(), []string{id})
				case 4:
					if rng.IntN(10) == 0 {
						_ = c.Terminate(t.Context(), []string{id})
					}
				}
			}
		}()
	}
	for range 400 {
		clk.Advance(500 * time.Millisecond)
	}
	wg.Wait()
	c.Close()
	clk.Settle()
	notices := rec.take()
	if rec.overlap {
		t.Fatal("Lifecycle calls overlapped")
	}
	byID := map[string][]notice{}
	for _, n := range notices {
		byID[n.id] = append(byID[n.id], n)
	}
	for id, ns := range byID {
		for i, n := range ns {
			if n.running != (i%2 == 0) {
				t.Fatalf("%s: notices do not alternate: %v", id, ns)
			}
			if i > 0 && n.at.Before(ns[i-1].at) {
				t.Fatalf("%s: notices out of time order: %v", id, ns)
			}
		}
		if len(ns)%2 != 0 {
			t.Fatalf("%s: a Running without its Halted after Close: %v", id, ns)
		}
	}
	if !slices.ContainsFunc(notices, func(n notice) bool { return !n.running }) {
		t.Fatal("no machine ever halted; the test exercised nothing")
	}
}
