package reaper

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/testlog"
)

// machines launches n machines and records them as rows in state st.
func (f *fixture) machines(n int, st domain.State) []domain.Instance {
	f.T.Helper()
	ms, err := f.cloud.Create(f.Ctx, domain.LaunchSpec{Runner: domain.RunnerSpec{Name: "small"}, ImageID: "ami-1", Count: n})
	if err != nil {
		f.T.Fatal(err)
	}
	ids := make([]string, n)
	for i, m := range ms {
		ids[i] = m.ID
	}
	return f.rowsFor(ids, st)
}

// rowsFor records one row in state st per cloud id ("" for none).
func (f *fixture) rowsFor(cloudIDs []string, st domain.State) []domain.Instance {
	f.T.Helper()
	rows := make([]domain.Instance, len(cloudIDs))
	for i, id := range cloudIDs {
		f.rows++
		rows[i] = domain.Instance{
			ID: fmt.Sprintf("bp-%04d", f.rows), CloudID: id, Role: domain.RoleHot, Runner: "small",
			State: st, Deadline: f.Clock.Now().Add(10 * time.Minute), Reason: "test",
		}
	}
	f.createRows(rows...)
	f.cloud.ResetCalls()
	return rows
}

// wantStates fails unless every row is in st.
func (f *fixture) wantStates(rows []domain.Instance, st domain.State) {
	f.T.Helper()
	for _, r := range rows {
		got := f.Instance(r.ID)
		if got.State != st {
			f.T.Fatalf("%s (%s) is %s, want %s", r.ID, r.CloudID, got.State, st)
		}
		if st == domain.StateTerminated && !got.Deadline.IsZero() {
			f.T.Fatalf("%s closed with a deadline %s", r.ID, got.Deadline)
		}
	}
}

// wantMachines fails unless every row's machine is in cs.
func (f *fixture) wantMachines(rows []domain.Instance, cs domain.CloudState) {
	f.T.Helper()
	for _, r := range rows {
		if m, ok := f.cloud.Get(r.CloudID); !ok || m.State != cs {
			f.T.Fatalf("machine %s is %q (known %v), want %s", r.CloudID, m.State, ok, cs)
		}
	}
}

func (f *fixture) sweep(wantClosed int, wantErr bool) {
	f.T.Helper()
	n, err := f.term.Sweep(f.Ctx)
	if (err != nil) != wantErr || n != wantClosed {
		f.T.Fatalf("sweep closed %d, err %v; want %d, error %v", n, err, wantClosed, wantErr)
	}
}

func (f *fixture) terminateCalls() (calls, maxIDs int) {
	return f.cloud.Calls()[sim.OpTerminateInstances], f.cloud.MaxIDsPerCall()[sim.OpTerminateInstances]
}

func TestSweepTerminatesInBatchesOfFifty(t *testing.T) {
	for _, tc := range []struct{ rows, calls, maxIDs int }{{1, 1, 1}, {50, 1, 50}, {51, 2, 50}, {120, 3, 50}} {
		t.Run(fmt.Sprint(tc.rows), func(t *testing.T) {
			f := newFixture(t)
			keep := f.machines(3, domain.StateReady)
			doomed := f.machines(tc.rows, domain.StateTerminating)
			f.sweep(tc.rows, false)
			if calls, maxIDs := f.terminateCalls(); calls != tc.calls || maxIDs != tc.maxIDs {
				t.Fatalf("%d calls of up to %d ids, want %d of up to %d", calls, maxIDs, tc.calls, tc.maxIDs)
			}
			f.wantStates(doomed, domain.StateTerminated)
			f.wantMachines(doomed, domain.CloudTerminated)
			f.wantStates(keep, domain.StateReady)
			f.wantMachines(keep, domain.CloudRunning)
			f.sweep(0, false) // nothing left to do
			if calls, _ := f.terminateCalls(); calls != tc.calls {
				t.Fatalf("an empty sweep called the cloud")
			}
		})
	}
}

func TestSweepClosesRowsWithoutAMachineWithoutACall(t *testing.T) {
	f := newFixture(t)
	rows := f.rowsFor([]string{"", ""}, domain.StateTerminating)
	f.sweep(2, false)
	f.wantStates(rows, domain.StateTerminated)
	if calls, _ := f.terminateCalls(); calls != 0 {
		t.Fatalf("%d terminate calls for rows without a machine", calls)
	}
}

// A machine the cloud no longer knows does not hold back its batch: the
// provider terminates the others and names it, and its row is closed too.
func TestSweepClosesTheRowOfAnUnknownMachineWithTheRest(t *testing.T) {
	f := newFixture(t)
	real := f.machines(3, domain.StateTerminating)
	gone := f.rowsFor([]string{"i-0000000000000dead"}, domain.StateTerminating)
	f.sweep(4, false)
	f.wantStates(append(real, gone...), domain.StateTerminated)
	f.wantMachines(real, domain.CloudTerminated)
}

func TestSweepLeavesRowsForTheNextSweepWhenACallFails(t *testing.T) {
	f := newFixture(t)
	rows := f.machines(60, domain.StateTerminating)
	f.cloud.FailNext(sim.OpTerminateInstances, 1, nil)
	f.sweep(10, true) // the first batch of 50 failed, the second went through
	f.wantStates(rows[:50], domain.StateTerminating)
	f.wantMachines(rows[:50], domain.CloudRunning)
	f.wantStates(rows[50:], domain.StateTerminated)
	f.sweep(50, false)
	f.wantStates(rows, domain.StateTerminated)
	f.wantMachines(rows, domain.CloudTerminated)
}

func TestRunSweepsEveryInterval(t *testing.T) {
	f := newFixture(t)
	f.term.Interval = time.Minute
	stop := f.Run(f.term.Loop())
	f.Clock.BlockUntil(1) // the first sweep is over; the loop waits
	rows := f.machines(2, domain.StateTerminating)
	f.Clock.Advance(time.Minute - time.Second)
	f.wantStates(rows, domain.StateTerminating)
	f.Clock.Advance(time.Second)
	f.Clock.BlockUntil(1) // the second sweep is over
	f.wantStates(rows, domain.StateTerminated)
	stop()
}

// A TerminateInstances call that fails (its permission taken away, say)
// is counted apart from the loop's failures, so that an alert on cloud
// errors covers the terminator; what it marks and closes is counted too.
func TestTheTerminatorCountsWhatItDoesAndItsFailedCloudCalls(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewPedanticRegistry()
	if err := f.term.Init(reg); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "bullpen_terminator_actions_total", "bullpen_terminator_cloud_errors_total"); err != nil || n != 4 {
		t.Fatalf("%d series before anything happened, %v; want every one at zero", n, err)
	}
	count := func(vec *prometheus.CounterVec, label string) float64 {
		return testutil.ToFloat64(vec.WithLabelValues(label))
	}
	rows := f.machines(2, domain.StateTerminating)
	f.cloud.FailNext(sim.OpTerminateInstances, 1, nil)
	f.sweep(0, true)
	if got := count(f.term.metrics.cloudErrors, "TerminateInstances"); got != 1 {
		t.Fatalf("failed terminate calls counted %g, want 1", got)
	}
	f.sweep(2, false)
	f.wantStates(rows, domain.StateTerminated)
	if got := count(f.term.metrics.actions, "terminated"); got != 2 {
		t.Fatalf("terminated counted %g, want 2", got)
	}
	late := f.machines(1, domain.StateReady)
	f.Clock.Advance(10 * time.Minute)
	if n, err := f.term.Expire(f.Ctx); err != nil || n != 1 {
		t.Fatalf("expired %d, %v; want %s", n, err, late[0].ID)
	}
	if got := count(f.term.metrics.actions, "expired"); got != 1 {
		t.Fatalf("expired counted %g, want 1", got)
	}
}

// One machine protected from termination does not hold back its batch:
// the others are terminated and their rows closed in the same sweep, which
// does not fail, and the protected machine's row stays terminating, set
// aside: logged once at WARN, counted at each refusal, and asked about
// again only after a wait that doubles, until the protection is lifted.
func TestSweepSetsAsideAMachineTheCloudRefusesToTerminate(t *testing.T) {
	f := newFixture(t)
	var log testlog.Buffer
	f.term.Log = slog.New(slog.NewTextHandler(&log, nil))
	if err := f.term.Init(prometheus.NewPedanticRegistry()); err != nil {
		t.Fatal(err)
	}
	rows := f.machines(3, domain.StateTerminating)
	protected, others := rows[1:2], []domain.Instance{rows[0], rows[2]}
	f.cloud.Protect(protected[0].CloudID, true)

	f.sweep(2, false)
	f.wantStates(others, domain.StateTerminated)
	f.wantMachines(others, domain.CloudTerminated)
	f.wantStates(protected, domain.StateTerminating)
	f.wantMachines(protected, domain.CloudRunning)
	refusals := func() float64 { return testutil.ToFloat64(f.term.metrics.actions.WithLabelValues("refused")) }
	if got := refusals(); got != 1 {
		t.Fatalf("refusals counted %g, want 1", got)
	}
	calls, _ := f.terminateCalls()
	// Each sweep that asks again is one call; the wait doubles from a minute.
	for _, step := range []struct {
		pass time.Duration
		asks bool
	}{{0, false}, {time.Minute - time.Second, false}, {time.Second, true}, {time.Minute, false}, {time.Minute, true}} {
		f.Clock.Advance(step.pass)
		f.sweep(0, false)
		if step.asks {
			calls++
		}
		if got, _ := f.terminateCalls(); got != calls {
			t.Fatalf("after %s more, %d terminate calls; want %d", step.pass, got, calls)
		}
	}
	if got := refusals(); got != 3 {
		t.Fatalf("refusals counted %g, want 3", got)
	}
	if lines := log.Lines("level=WARN", "refuses to terminate", protected[0].ID, "OperationNotPermitted"); len(lines) != 1 || len(log.Lines("level=WARN")) != 1 {
		t.Fatalf("log %q; want one warning naming the row and the cloud's code", log.String())
	}

	f.cloud.Protect(protected[0].CloudID, false)
	f.Clock.Advance(4 * time.Minute)
	f.sweep(1, false)
	f.wantStates(protected, domain.StateTerminated)
	f.wantMachines(protected, domain.CloudTerminated)
}
