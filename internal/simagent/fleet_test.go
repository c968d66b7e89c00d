package simagent_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/simagent"
)

// servingWorld wires a miniature control plane into the fakes: a warm or
// deregistered machine gets the next job at once (notified from inside the
// Signal call, as a real control plane may), a finished job is released, a
// failed registration terminates the machine. GitHub starts each job a
// second after its runner and ends it thirty seconds after.
func servingWorld(t *testing.T, opts simagent.Options) *world {
	w := newWorld(t, sim.Latency{Boot: 5 * sec, Terminate: sec}, opts)
	var mu sync.Mutex
	jobs := map[string]int64{} // jobs served per machine
	w.api.onSignal = func(s domain.Signal) {
		switch s.Kind {
		case domain.SignalWarm, domain.SignalDeregistered:
			// Job ids derived from the machine, not from the order of
			// concurrent calls, keep runs reproducible.
			mu.Lock()
			jobs[s.CloudID]++
			n := jobs[s.CloudID]
			mu.Unlock()
			var prefix int64
			if _, err := fmt.Sscanf(s.CloudID[:10], "i-%x", &prefix); err != nil {
				t.Error(err)
			}
			w.assign(s.CloudID, prefix*1000+n)
		case domain.SignalJobFinished:
			w.api.push(s.CloudID, release)
			w.fleet.Assigned(s.CloudID)
		case domain.SignalFailed:
			if err := w.cloud.Terminate(t.Context(), []string{s.CloudID}); err != nil {
				t.Error(err)
			}
		}
	}
	w.host.onRun = func(r *hostRun) {
		var job int64
		if _, err := fmt.Sscanf(r.jit, "jit-%d", &job); err != nil {
			t.Error(err)
		}
		w.clk.AfterFunc(sec, func() { r.onStart(job) })
		w.clk.AfterFunc(30*sec, func() { r.onDone(job, "success") })
	}
	return w
}

// cycle is the order in which a reused machine's signals repeat.
var cycle = []domain.SignalKind{
	domain.SignalRegistered, domain.SignalJobStarted, domain.SignalJobFinished, domain.SignalDeregistered,
}

// checkSequence asserts a machine's accepted signals are warm, then whole or
// partial cycles, each naming one job, or a failed registration that ends it.
func checkSequence(t *testing.T, id string, sigs []domain.Signal) (jobs []string) {
	t.Helper()
	if len(sigs) == 0 {
		return nil
	}
	if sigs[0].Kind != domain.SignalWarm {
		t.Fatalf("%s: first signal %s", id, sigs[0].Kind)
	}
	for i, s := range sigs[1:] {
		if s.Kind == domain.SignalFailed && i%4 == 0 && i == len(sigs)-2 {
			return jobs
		}
		if want := cycle[i%4]; s.Kind != want {
			t.Fatalf("%s: signal %d is %s, want %s", id, i+1, s.Kind, want)
		}
		switch i % 4 {
		case 0:
			jobs = append(jobs, s.Job)
		case 1, 2:
			if s.Job != jobs[len(jobs)-1] {
				t.Fatalf("%s: %s for job %s while serving %s", id, s.Kind, s.Job, jobs[len(jobs)-1])
			}
		}
	}
	return jobs
}

func accepted(w *world, id string) []domain.Signal {
	var out []domain.Signal
	for _, r := range w.api.of(id, "signal") {
		if !r.refused {
			out = append(out, r.sig)
		}
	}
	return out
}

func TestManyMachinesServeJobsConcurrently(t *testing.T) {
	w := servingWorld(t, simagent.Options{FailRegistrationEvery: 50})
	ids := w.create(t, 200)
	w.advanceTo(100 * sec)
	terminated, crashed := ids[:20], ids[20:30]
	w.act(func() {
		if err := w.cloud.Terminate(t.Context(), terminated); err != nil {
			t.Fatal(err)
		}
		for _, id := range crashed {
			w.fleet.Crash(id)
		}
	})
	w.advanceTo(300 * sec)

	served := map[string]string{}
	var signals, heartbeats int
	for i, id := range ids {
		for _, r := range w.api.of(id, "") {
			if i < 30 && r.at.After(at(100*sec)) {
				t.Fatalf("%s: %s at %v after its agent died", id, r.op, r.at.Sub(epoch))
			}
			if r.op == "heartbeat" {
				heartbeats++
			}
		}
		sigs := accepted(w, id)
		signals += len(sigs)
		jobs := checkSequence(t, id, sigs)
		for _, job := range jobs {
			if other, dup := served[job]; dup {
				t.Fatalf("job %s served by %s and %s", job, other, id)
			}
			served[job] = id
		}
		if i >= 30 && (i+1)%50 != 0 && len(jobs) < 8 {
			t.Fatalf("%s served %d jobs in 5 minutes, want at least 8", id, len(jobs))
		}
		if (i+1)%50 == 0 && len(jobs) != 0 {
			t.Fatalf("%s should fail every registration, served %v", id, jobs)
		}
	}
	st := w.fleet.Stats()
	total := 0
	for _, n := range st.Signals {
		total += n
	}
	if total != signals || st.Heartbeats != heartbeats || st.Runs != len(ids) {
		t.Fatalf("stats %+v: %d signals and %d heartbeats seen, %d machines", st, signals, heartbeats, len(ids))
	}
}

// The same scenario twice gives the same signals at the same instants.
func TestVirtualRunsAreReproducible(t *testing.T) {
	transcript := func() string {
		w := servingWorld(t, simagent.Options{NeverWarmEvery: 7, FailRegistrationEvery: 5, WarmUp: 3 * sec})
		ids := w.create(t, 40)
		w.advanceTo(20 * sec)
		var restarted []string // the first ten, less those terminated for a failed registration
		for _, id := range ids[:10] {
			if m, _ := w.cloud.Get(id); m.State == domain.CloudRunning {
				restarted = append(restarted, id)
			}
		}
		w.act(func() {
			if err := w.cloud.Stop(t.Context(), restarted); err != nil {
				t.Fatal(err)
			}
		})
		w.advanceTo(40 * sec)
		w.act(func() {
			if err := w.cloud.Start(t.Context(), restarted); err != nil {
				t.Fatal(err)
			}
		})
		w.advanceTo(200 * sec)
		var b strings.Builder
		for i, id := range ids {
			fmt.Fprintf(&b, "%d: %s\n", i, strings.Join(w.api.signals(t, id), ", "))
		}
		return b.String()
	}
	first := transcript()
	for range 3 {
		if again := transcript(); again != first {
			t.Fatalf("runs differ:\n%s\n---\n%s", first, again)
		}
	}
	if !strings.Contains(first, "reason="+simagent.InjectedRegistrationFailure) ||
		!slices.ContainsFunc(strings.Split(first, "\n"), func(l string) bool { return strings.HasSuffix(l, ": ") }) {
		t.Fatalf("the scenario exercised no injected fault:\n%s", first)
	}
}
