package launch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
	"github.com/bullpen-ci/bullpen/internal/launch"
	"github.com/bullpen-ci/bullpen/internal/spotbreaker"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite"
	"github.com/bullpen-ci/bullpen/internal/store/sqlite/sqlitetest"
)

var t0 = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

// spyCloud remembers the launch data of each create call.
type spyCloud struct {
	*sim.Cloud
	specs []domain.LaunchSpec
}

func (c *spyCloud) Create(ctx context.Context, spec domain.LaunchSpec) ([]domain.CloudInstance, error) {
	c.specs = append(c.specs, spec)
	return c.Cloud.Create(ctx, spec)
}

func newLauncher(t *testing.T, store launch.Store) (*launch.Launcher, *spyCloud, *sqlite.Store) {
	t.Helper()
	clk := clock.NewVirtual(t0)
	st, _ := sqlitetest.Open(t, clk)
	c := &spyCloud{Cloud: sim.New(clk, sim.Options{Seed: 1})}
	t.Cleanup(c.Close)
	if store == nil {
		store = st
	}
	return &launch.Launcher{Store: store, Cloud: c, Clock: clk, Verbs: domain.NewLifecycle(domain.Deadlines{}),
		ControllerID: "bullpen-test", AgentURL: "http://127.0.0.1:1"}, c, st
}

func fleet(n int) launch.Fleet {
	rows := make([]domain.Instance, n)
	for i := range rows {
		rows[i] = domain.Instance{ID: domain.NewID("bp"), Pool: "linux", Role: domain.RoleHot, Runner: "small"}
	}
	return launch.Fleet{Rows: rows, Spec: domain.RunnerSpec{Name: "small"}, Image: "ami-1",
		Tags: map[string]string{domain.TagPool: "linux"}}
}

// Each machine's row holds the hash of its own machine secret, derived
// from the launch's: a sibling's secret does not match it, nor does the
// launch secret itself.
func TestEachMachineGetsItsOwnBootstrapSecret(t *testing.T) {
	l, c, st := newLauncher(t, nil)
	res, err := l.Launch(t.Context(), fleet(3))
	if err != nil || len(res.Booted) != 3 {
		t.Fatalf("launch: %d booted, %v", len(res.Booted), err)
	}
	spec := c.specs[0]
	if spec.Tags[domain.TagController] != "bullpen-test" || spec.Tags[domain.TagLaunch] != spec.Agent.LaunchID ||
		spec.ClientToken != spec.Agent.LaunchID || spec.Tags[domain.TagPool] != "linux" {
		t.Fatalf("launch spec tags %v token %q", spec.Tags, spec.ClientToken)
	}
	seen := map[string]bool{}
	for _, in := range res.Booted {
		row, err := st.GetInstance(t.Context(), in.ID)
		if err != nil {
			t.Fatal(err)
		}
		if row.State != domain.StateBooting || row.CloudID == "" || row.LaunchID != spec.Agent.LaunchID {
			t.Fatalf("row %s %s cloud id %q launch %q", row.ID, row.State, row.CloudID, row.LaunchID)
		}
		if row.BootstrapHash != domain.HashSecret(domain.MachineSecret(spec.Agent.Secret, row.CloudID)) {
			t.Fatalf("row %s does not hold its machine's own secret hash", row.ID)
		}
		if row.BootstrapHash == domain.HashSecret(spec.Agent.Secret) || seen[row.BootstrapHash] {
			t.Fatalf("row %s accepts the launch secret or a sibling's", row.ID)
		}
		seen[row.BootstrapHash] = true
	}
}

// A fleet the cloud fills partly boots what came and closes the rest.
func TestAPartialFleetClosesTheRowsLeftUnfilled(t *testing.T) {
	l, c, _ := newLauncher(t, nil)
	c.SetCapacity(2)
	res, err := l.Launch(t.Context(), fleet(5))
	if !errors.Is(err, domain.ErrInsufficientCapacity) {
		t.Fatalf("err %v, want insufficient capacity", err)
	}
	if len(res.Booted) != 2 || len(res.Closed) != 3 {
		t.Fatalf("%d booted, %d closed; want 2 and 3", len(res.Booted), len(res.Closed))
	}
	for _, in := range res.Closed {
		if in.State != domain.StateTerminated || in.CloudID != "" {
			t.Fatalf("unfilled row %s %s with cloud id %q", in.ID, in.State, in.CloudID)
		}
	}
}

// failingRecords refuses to record any launched machine, as a full disk
// would once the create call went through.
type failingRecords struct{ *sqlite.Store }

func (s failingRecords) TransitionBatch(context.Context, []domain.TransitionRequest) ([]domain.TransitionResult, error) {
	return nil, errors.New("disk full")
}

// Machines no row could record are not left running for the orphan sweep.
func TestMachinesThatCannotBeRecordedAreTerminated(t *testing.T) {
	l, c, _ := newLauncher(t, nil)
	l.Store = failingRecords{l.Store.(*sqlite.Store)}
	if _, err := l.Launch(t.Context(), fleet(2)); err == nil {
		t.Fatal("no error, though no machine was recorded")
	}
	for _, m := range c.Instances() {
		if m.State != domain.CloudTerminated && m.State != domain.CloudShuttingDown {
			t.Fatalf("machine %s left %s", m.ID, m.State)
		}
	}
}

// The spot circuit breaker is asked at every launch: while it is open for
// a runner class, that class's spot fleets launch on-demand, and the rows
// say so; other classes, on-demand fleets and the class once its cooldown
// has ended launch as their spec asks.
func TestTheSpotBreakerDecidesEachLaunch(t *testing.T) {
	const pco = "price-capacity-optimized"
	cases := []struct {
		name   string
		runner string
		spot   string
		after  time.Duration // from the breaker's opening
		want   string        // usage class of the machine
	}{
		{"open class, spot asked", "small", pco, 0, "on-demand"},
		{"open class, near the end of the cooldown", "small", pco, 30*time.Minute - time.Second, "on-demand"},
		{"open class, cooldown ended", "small", pco, 30 * time.Minute, "spot"},
		{"closed class", "large", pco, 0, "spot"},
		{"open class, on-demand asked", "small", "", 0, "on-demand"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, cloud, st := newLauncher(t, nil)
			clk := l.Clock.(*clock.Virtual)
			b, err := spotbreaker.New(spotbreaker.Options{}, clk, slog.New(slog.DiscardHandler), nil)
			if err != nil {
				t.Fatal(err)
			}
			l.SpotAllowed = b.SpotAllowed
			b.Record("small", clk.Now())
			b.Record("small", clk.Now())
			clk.Advance(c.after)
			f := fleet(1)
			f.Rows[0].Runner, f.Spec = c.runner, domain.RunnerSpec{Name: c.runner, Spot: c.spot}
			res, err := l.Launch(t.Context(), f)
			if err != nil || len(res.Booted) != 1 {
				t.Fatalf("launch: %d booted, %v", len(res.Booted), err)
			}
			if asked := cloud.specs[0].Runner.Spot; (asked != "") != (c.want == "spot") {
				t.Errorf("create call asked spot %q, want %s", asked, c.want)
			}
			row, err := st.GetInstance(t.Context(), res.Booted[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			if row.UsageClass != c.want {
				t.Errorf("row usage class %q, want %q", row.UsageClass, c.want)
			}
		})
	}
}

// The launcher's ids come from IDs when given (a simulation's seeded
// sequence), else at random: its launches' ids, and those its callers give
// a fleet's rows (Launcher.ID).
func TestTheLauncherDrawsIdsFromItsSource(t *testing.T) {
	l, c, st := newLauncher(t, nil)
	if a, b := l.ID("bp"), l.ID("bp"); !strings.HasPrefix(a, "bp-") || a == b {
		t.Fatalf("random ids %q and %q", a, b)
	}
	n := 0
	l.IDs = func(prefix string) string { n++; return fmt.Sprintf("%s-%d", prefix, n) }
	f := fleet(2)
	for i := range f.Rows {
		f.Rows[i].ID = l.ID("bp")
	}
	res, err := l.Launch(t.Context(), f)
	if err != nil || len(res.Booted) != 2 || res.Booted[0].ID != "bp-1" || res.Booted[1].ID != "bp-2" || res.Booted[0].LaunchID != "lt-3" {
		t.Fatalf("launch with IDs: %+v, %v; want rows bp-1 and bp-2 of launch lt-3", res.Booted, err)
	}
	if row, err := st.GetInstance(t.Context(), "bp-2"); err != nil || row.CloudID == "" || c.specs[0].Agent.LaunchID != "lt-3" {
		t.Fatalf("row bp-2: %+v, %v", row, err)
	}
}

// cancellingCloud is a create call during which the caller's context ends,
// as a SIGTERM or a lost lease ends a loop's step.
type cancellingCloud struct {
	*spyCloud
	cancel context.CancelFunc
}

func (c cancellingCloud) Create(ctx context.Context, spec domain.LaunchSpec) ([]domain.CloudInstance, error) {
	c.cancel()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.spyCloud.Create(ctx, spec)
}

// A step cancelled while its fleet is created still records the machines:
// no row stays pending (counted as capacity on the way, it would hold the
// pool's refills back until its deadline) and no machine goes unrecorded.
func TestALaunchCancelledMidCallIsRecorded(t *testing.T) {
	l, c, st := newLauncher(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	l.Cloud = cancellingCloud{spyCloud: c, cancel: cancel}
	res, err := l.Launch(ctx, fleet(3))
	if err != nil || len(res.Booted) != 3 {
		t.Fatalf("launch: %d booted, %v", len(res.Booted), err)
	}
	rows, err := st.ListInstances(t.Context(), domain.InstanceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if row.State != domain.StateBooting || row.CloudID == "" {
			t.Errorf("row %s is %s with cloud id %q, want booting with its machine", row.ID, row.State, row.CloudID)
		}
	}
}
