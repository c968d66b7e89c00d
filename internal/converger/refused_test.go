package converger

import (
	"context"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// One member whose machine is protected from termination does not hold
// back the others of its terminate: their rows are closed, its row stays
// terminating for the terminator, and the cycle, whose only cloud call
// went through for the others, is not a blind one.
func TestAProtectedMemberDoesNotHoldBackItsTerminate(t *testing.T) {
	w := newWorld(t, domain.Target{Hot: 3}, sim.Options{}, Options{})
	w.converge(5)
	members := w.rows(domain.StateReady)
	protected := members[1]
	w.cloud.Protect(protected.CloudID, true)

	w.setTarget(domain.Target{})
	rep, err := w.conv.Cycle(context.Background())
	if err != nil || rep.CloudErr != nil {
		t.Fatalf("cycle: %v, cloud error %v; want the refusal read as the cloud's answer", err, rep.CloudErr)
	}
	if got := Describe(rep.Pools[0].Plan); got != "terminate/excess×3" {
		t.Fatalf("plan %q", got)
	}
	if err := rep.Pools[0].Err; err != nil {
		t.Fatalf("pool error %v; want none: the terminator owns the refused row", err)
	}
	for _, in := range members {
		got := w.Instance(in.ID)
		if want := map[bool]domain.State{true: domain.StateTerminating, false: domain.StateTerminated}[in.ID == protected.ID]; got.State != want {
			t.Errorf("%s is %s, want %s", in.ID, got.State, want)
		}
	}
	if ok, failed := w.actions("terminate", "excess", "ok"), w.actions("terminate", "excess", "error"); ok != 2 || failed != 1 {
		t.Fatalf("terminations counted ok %g, error %g; want 2 and 1", ok, failed)
	}
}

// stillStopping is a cloud on which some machines are still stopping: a
// start call starts the others and names these as refused, as the port
// says a provider does.
type stillStopping struct {
	*sim.Cloud
	stopping []string // cloud ids
}

func (c stillStopping) Start(ctx context.Context, ids []string) error {
	var rest, refused []string
	for _, id := range ids {
		if slices.Contains(c.stopping, id) {
			refused = append(refused, id)
		} else {
			rest = append(rest, id)
		}
	}
	if len(rest) > 0 {
		if err := c.Cloud.Start(ctx, rest); err != nil {
			return err
		}
	}
	if len(refused) == 0 {
		return nil
	}
	return &domain.CloudError{Op: sim.OpStartInstances, Code: sim.CodeIncorrectState, Err: &domain.RefusedInstancesError{
		Op: sim.OpStartInstances, Code: sim.CodeIncorrectState, IDs: refused, Reason: "not in a state from which it can be started"}}
}

// A parked member whose machine is still stopping cannot be started yet:
// the cloud starts the others and names it as refused. Only it is parked
// again; the others, whose machines run, are hot members booting.
func TestAMemberStillStoppingIsTheOnlyOneParkedAgain(t *testing.T) {
	w := newWorld(t, domain.Target{Stopped: 3}, sim.Options{Latency: latency}, Options{})
	w.converge(10)
	parked := w.rows(domain.StateStopped)
	slow := parked[0]
	conv, err := New(w.Store, stillStopping{Cloud: w.cloud, stopping: []string{slow.CloudID}}, w.Clock, w.pools, w.Log,
		prometheus.NewRegistry(), Options{ControllerID: "test", LeaseTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.conv = conv

	w.setTarget(domain.Target{Hot: 3})
	r := w.cycle()
	if got := Describe(r.Plan); got != "start/convert×3" {
		t.Fatalf("plan %q", got)
	}
	for _, in := range parked {
		got := w.Instance(in.ID)
		m, _ := w.cloud.Get(in.CloudID)
		switch {
		case in.ID == slow.ID && (got.State != domain.StateStopped || got.Role != domain.RoleStopped || m.State != domain.CloudStopped):
			t.Errorf("member still stopping is %s (%s), its machine %s; want it parked again", got.State, got.Role, m.State)
		case in.ID != slow.ID && (got.State != domain.StateBooting || m.State != domain.CloudPending):
			t.Errorf("started member %s is %s, its machine %s; want it booting", in.ID, got.State, m.State)
		}
	}
	if ok, failed := w.actions("start", "convert", "ok"), w.actions("start", "convert", "error"); ok != 2 || failed != 1 {
		t.Fatalf("starts counted ok %g, error %g; want 2 and 1", ok, failed)
	}
}
