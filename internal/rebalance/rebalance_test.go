package rebalance

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

const spec = "spec-v2"

// inst builds a healthy pool member; opts adjust it.
func inst(id string, role domain.Role, state domain.State, opts ...func(*domain.Instance)) domain.Instance {
	in := domain.Instance{
		ID: id, CloudID: "i-" + id, Pool: "p", Role: role, State: state, SpecHash: spec,
		CreatedAt: now.Add(-5 * time.Minute), StateSince: now.Add(-time.Minute),
		Deadline: now.Add(time.Hour),
	}
	if state == domain.StateBooting || state == domain.StateReady {
		in.RunningSince = now.Add(-2 * time.Minute)
	}
	for _, o := range opts {
		o(&in)
	}
	return in
}

func since(d time.Duration) func(*domain.Instance) {
	return func(i *domain.Instance) { i.StateSince = now.Add(-d) }
}
func runningFor(d time.Duration) func(*domain.Instance) {
	return func(i *domain.Instance) { i.RunningSince = now.Add(-d) }
}
func created(d time.Duration) func(*domain.Instance) {
	return func(i *domain.Instance) { i.CreatedAt = now.Add(-d) }
}
func hash(h string) func(*domain.Instance) { return func(i *domain.Instance) { i.SpecHash = h } }
func job(j string) func(*domain.Instance)  { return func(i *domain.Instance) { i.Job = j } }
func started() func(*domain.Instance)      { return func(i *domain.Instance) { i.JobStarted = true } }
func expired() func(*domain.Instance)      { return func(i *domain.Instance) { i.Deadline = now } }
func noCloudID() func(*domain.Instance)    { return func(i *domain.Instance) { i.CloudID = "" } }
func onSpot() func(*domain.Instance)       { return func(i *domain.Instance) { i.UsageClass = "spot" } }

// render writes a plan compactly, the members it keeps last:
// "terminate/error[a b] create/hot×2 kept/starts-held[c]".
func render(p Plan) string {
	var parts []string
	for _, s := range p.Steps {
		if s.Action == Create {
			parts = append(parts, fmt.Sprintf("create/%s×%d", s.Role, s.Count))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s/%s[%s]", s.Action, s.Reason, idsOf(s.Instances)))
	}
	for _, k := range p.Kept {
		parts = append(parts, fmt.Sprintf("kept/%s[%s]", k.Reason, idsOf(k.Instances)))
	}
	return strings.Join(parts, " ")
}

func idsOf(insts []domain.Instance) string {
	var ids []string
	for _, in := range insts {
		ids = append(ids, in.ID)
	}
	return strings.Join(ids, " ")
}

// cloudOf describes every instance as running, except those listed as gone.
func cloudOf(insts []domain.Instance, states map[string]domain.CloudState) map[string]domain.CloudInstance {
	m := map[string]domain.CloudInstance{}
	for _, in := range insts {
		if in.CloudID == "" {
			continue
		}
		st, ok := states[in.ID]
		usage := "on-demand"
		if st == "spot" { // running on spot capacity
			st, ok, usage = domain.CloudRunning, true, "spot"
		}
		if !ok {
			st = domain.CloudRunning
			if in.State == domain.StateStopped {
				st = domain.CloudStopped
			}
		}
		if st == "" { // missing from the listing
			continue
		}
		m[in.CloudID] = domain.CloudInstance{ID: in.CloudID, State: st, UsageClass: usage}
	}
	return m
}

// snapshotOf is pool p at now, of the current spec, holding insts, with a
// cloud listing as cloudOf makes it from states.
func snapshotOf(target domain.Target, insts []domain.Instance, states map[string]domain.CloudState) Snapshot {
	return Snapshot{Pool: "p", Now: now, Target: target, SpecHash: spec, Instances: insts, Cloud: cloudOf(insts, states)}
}

// wantPlan fails the test unless s plans want, as render writes it.
func wantPlan(t *testing.T, s Snapshot, want string) {
	t.Helper()
	if got := render(Compute(s)); got != want {
		t.Errorf("plan\n got: %s\nwant: %s", got, want)
	}
}

func TestCompute(t *testing.T) {
	H, S := domain.RoleHot, domain.RoleStopped
	cases := []struct {
		name   string
		target domain.Target
		insts  []domain.Instance
		cloud  map[string]domain.CloudState // by instance id; "" = absent from listing
		noView bool                         // the cloud listing failed this cycle
		want   string
	}{
		{name: "empty pool creates hot and stopped in one batch each", target: domain.Target{Hot: 1, Stopped: 2},
			want: "create/hot×1 create/stopped×2"},
		{name: "pool at target does nothing", target: domain.Target{Hot: 1, Stopped: 2},
			insts: []domain.Instance{inst("h1", H, domain.StateReady), inst("s1", S, domain.StateStopped), inst("s2", S, domain.StateStopped)},
			want:  ""},
		{name: "warming instances count toward the target", target: domain.Target{Hot: 1, Stopped: 2},
			insts: []domain.Instance{inst("h1", H, domain.StatePending, noCloudID()), inst("s1", S, domain.StateBooting), inst("s2", S, domain.StateStopping)},
			cloud: map[string]domain.CloudState{"s2": domain.CloudStopping},
			want:  ""},
		{name: "error instance is terminated and replaced", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateError)},
			want:  "terminate/error[h1] create/hot×1"},
		{name: "booting past its deadline counts as an error", target: domain.Target{Stopped: 1},
			insts: []domain.Instance{inst("s1", S, domain.StatePending, noCloudID(), expired())},
			want:  "terminate/deadline[s1] create/stopped×1"},
		{name: "stopped member past its deadline is refreshed", target: domain.Target{Stopped: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateStopped, expired())},
			want:  "terminate/deadline[s1] create/stopped×1"},
		{name: "warm-up running 10 minutes without a job is dangling", target: domain.Target{Stopped: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateBooting, runningFor(10*time.Minute))},
			want:  "terminate/dangling[s1] create/stopped×1"},
		{name: "warm-up just under 10 minutes is left alone", target: domain.Target{Stopped: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateBooting, runningFor(10*time.Minute-time.Second))},
			want:  ""},
		{name: "warmed stopped member never parked is dangling", target: domain.Target{Stopped: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateReady, runningFor(11*time.Minute))},
			want:  "terminate/dangling[s1] create/stopped×1"},
		{name: "hot idle past its lifetime is replaced before it goes", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateReady, since(10*time.Minute), runningFor(12*time.Minute))},
			want:  "create/hot×1"},
		{name: "hot idle past its lifetime goes once its replacement is ready", target: domain.Target{Hot: 1},
			insts: []domain.Instance{
				inst("h1", H, domain.StateReady, since(11*time.Minute), runningFor(12*time.Minute)),
				inst("n1", H, domain.StateReady, since(10*time.Second)),
			},
			want: "terminate/idle-lifetime[h1]"},
		{name: "hot members expiring together stay until replacements are ready", target: domain.Target{Hot: 3},
			insts: []domain.Instance{
				inst("h1", H, domain.StateReady, since(10*time.Minute)),
				inst("h2", H, domain.StateReady, since(10*time.Minute)),
				inst("h3", H, domain.StateReady, since(10*time.Minute)),
			},
			want: "create/hot×3"},
		{name: "expired hot members go one by one as replacements become ready, longest idle first", target: domain.Target{Hot: 3},
			insts: []domain.Instance{
				inst("h1", H, domain.StateReady, since(11*time.Minute)),
				inst("h2", H, domain.StateReady, since(12*time.Minute)),
				inst("h3", H, domain.StateReady, since(10*time.Minute)),
				inst("n1", H, domain.StateReady, since(10*time.Second)),
				inst("n2", H, domain.StateBooting),
				inst("n3", H, domain.StateBooting),
			},
			want: "terminate/idle-lifetime[h2]"},
		{name: "no idle-lifetime retirement while the pool is below target", target: domain.Target{Hot: 2},
			insts: []domain.Instance{
				inst("h1", H, domain.StateReady, since(time.Hour)),
				inst("n1", H, domain.StateReady),
			},
			want: "create/hot×1"},
		{name: "an expired hot member of another spec is not kept", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateReady, since(10*time.Minute), hash("spec-v1"))},
			want:  "terminate/idle-lifetime[h1] create/hot×1"},
		{name: "a pool drained to zero keeps no expired hot member", target: domain.Target{},
			insts: []domain.Instance{inst("h1", H, domain.StateReady, since(10*time.Minute))},
			want:  "terminate/idle-lifetime[h1]"},
		{name: "hot idle within its lifetime stays", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateReady, since(9*time.Minute), runningFor(30*time.Minute))},
			want:  ""},
		{name: "outdated instances go before new ones come", target: domain.Target{Hot: 1, Stopped: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateReady, hash("spec-v1")), inst("s1", S, domain.StateStopped, hash("spec-v1"))},
			want:  "terminate/outdated[h1 s1] create/hot×1 create/stopped×1"},
		{name: "claimed instance is never touched nor counted", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateClaimed, hash("spec-v1"), job("j1"), expired())},
			want:  "create/hot×1"},
		{name: "instance whose job started is never touched", target: domain.Target{},
			insts: []domain.Instance{inst("s1", S, domain.StateReady, started(), runningFor(time.Hour), hash("old"))},
			want:  ""},
		{name: "running and releasing instances are never touched", target: domain.Target{},
			insts: []domain.Instance{inst("a", H, domain.StateRunning, job("j")), inst("b", H, domain.StateReleasing, expired())},
			want:  ""},
		{name: "warmed stopped member is stopped", target: domain.Target{Stopped: 2},
			insts: []domain.Instance{inst("s1", S, domain.StateReady), inst("s2", S, domain.StateStopped)},
			want:  "stop/warm[s1]"},
		{name: "a stop the cloud did not carry out is sent again", target: domain.Target{Stopped: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateStopping)},
			cloud: map[string]domain.CloudState{"s1": domain.CloudRunning},
			want:  "stop/restop[s1]"},
		{name: "a stop in progress is left alone", target: domain.Target{Stopped: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateStopping)},
			cloud: map[string]domain.CloudState{"s1": domain.CloudStopping},
			want:  ""},
		{name: "a finished stop is settled", target: domain.Target{Stopped: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateStopping)},
			cloud: map[string]domain.CloudState{"s1": domain.CloudStopped},
			want:  "settle/stopped[s1]"},
		{name: "excess hot goes least useful first, then oldest", target: domain.Target{Hot: 1},
			insts: []domain.Instance{
				inst("new", H, domain.StateReady, created(time.Minute)),
				inst("old", H, domain.StateReady, created(9*time.Minute)),
				inst("boot", H, domain.StateBooting),
			},
			want: "terminate/excess[boot old]"},
		{name: "excess stopped keeps the parked ones", target: domain.Target{Stopped: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateStopped, created(time.Hour)), inst("s2", S, domain.StateBooting)},
			want:  "terminate/excess[s2]"},
		{name: "schedule drop to zero terminates every member", target: domain.Target{},
			insts: []domain.Instance{inst("h1", H, domain.StateReady), inst("s1", S, domain.StateStopped)},
			want:  "terminate/excess[h1] terminate/excess[s1]"},
		{name: "warm member that is also excess is terminated, not stopped", target: domain.Target{Stopped: 2},
			insts: []domain.Instance{inst("s1", S, domain.StateStopped), inst("s2", S, domain.StateReady), inst("s3", S, domain.StateReady, created(time.Hour))},
			want:  "stop/warm[s2] terminate/excess[s3]"},
		{name: "a schedule swapping stopped for hot starts the parked members", target: domain.Target{Hot: 2},
			insts: []domain.Instance{inst("s1", S, domain.StateStopped), inst("s2", S, domain.StateStopped)},
			want:  "start/convert[s1 s2]"},
		{name: "a schedule swapping hot for stopped parks the ready hot members", target: domain.Target{Stopped: 2},
			insts: []domain.Instance{inst("h1", H, domain.StateReady), inst("h2", H, domain.StateReady)},
			want:  "stop/convert[h1 h2]"},
		{name: "a spot hot member is never stopped: it goes as excess", target: domain.Target{Stopped: 2},
			insts: []domain.Instance{inst("h1", H, domain.StateReady, onSpot()), inst("h2", H, domain.StateReady)},
			want:  "stop/convert[h2] create/stopped×1 terminate/excess[h1]"},
		{name: "a hot member the cloud lists as spot is never stopped", target: domain.Target{Hot: 1, Stopped: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateReady, created(time.Hour)), inst("h2", H, domain.StateReady)},
			cloud: map[string]domain.CloudState{"h1": "spot"},
			want:  "stop/convert[h2]"},
		{name: "only as many parked members start as hot ones are missing, oldest first", target: domain.Target{Hot: 1, Stopped: 1},
			insts: []domain.Instance{
				inst("s1", S, domain.StateStopped, created(time.Minute)),
				inst("s2", S, domain.StateStopped, created(time.Hour)),
			},
			want: "start/convert[s2]"},
		{name: "hot members are parked only beyond the ready ones the hot target needs", target: domain.Target{Hot: 1, Stopped: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateReady), inst("h2", H, domain.StateBooting)},
			want:  "create/stopped×1 terminate/excess[h2]"},
		{name: "a parked member starts while a warming stopped member keeps its place", target: domain.Target{Hot: 1, Stopped: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateStopped), inst("s2", S, domain.StateBooting)},
			want:  "start/convert[s1]"},
		{name: "what cannot be converted is replaced", target: domain.Target{Hot: 3},
			insts: []domain.Instance{inst("s1", S, domain.StateStopped), inst("s2", S, domain.StateBooting), inst("s3", S, domain.StateReady)},
			want:  "start/convert[s1] create/hot×2 terminate/excess[s2 s3]"},
		{name: "a member whose machine is still stopping is not started", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateStopped)},
			cloud: map[string]domain.CloudState{"s1": domain.CloudStopping},
			want:  "create/hot×1 terminate/excess[s1]"},
		{name: "outdated members are rolled, not converted", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateStopped, hash("spec-v1"))},
			want:  "terminate/outdated[s1] create/hot×1"},
		{name: "machine gone from the cloud is forgotten and replaced", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateReady)},
			cloud: map[string]domain.CloudState{"h1": ""},
			want:  "forget/gone[h1] create/hot×1"},
		{name: "machine shutting down is forgotten", target: domain.Target{Stopped: 1},
			insts: []domain.Instance{inst("s1", S, domain.StateStopped)},
			cloud: map[string]domain.CloudState{"s1": domain.CloudShuttingDown},
			want:  "forget/gone[s1] create/stopped×1"},
		{name: "young row missing from the listing is trusted", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateBooting, created(time.Minute))},
			cloud: map[string]domain.CloudState{"h1": ""},
			want:  ""},
		{name: "without a cloud view nothing is forgotten", target: domain.Target{Hot: 1},
			insts:  []domain.Instance{inst("h1", H, domain.StateReady)},
			noView: true,
			want:   ""},
		{name: "terminations under way are left to the terminator", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateTerminating)},
			want:  "create/hot×1"},
		{name: "instances launched for jobs are not pool members", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("od", domain.RoleOnDemand, domain.StateReady, hash("other"), runningFor(time.Hour))},
			want:  "create/hot×1"},
		{name: "terminated rows are history", target: domain.Target{Hot: 1},
			insts: []domain.Instance{inst("h1", H, domain.StateTerminated)},
			want:  "create/hot×1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := snapshotOf(c.target, c.insts, c.cloud)
			if c.noView {
				s.Cloud = nil
			}
			wantPlan(t, s, c.want)
		})
	}
}

func TestComputeFollowsTheRebalanceOrder(t *testing.T) {
	H, S := domain.RoleHot, domain.RoleStopped
	insts := []domain.Instance{
		inst("gone", H, domain.StateReady),
		inst("err", S, domain.StateError),
		inst("late", S, domain.StateStopping, expired()),
		inst("dang", S, domain.StateBooting, runningFor(time.Hour)),
		inst("idle", H, domain.StateReady, since(time.Hour)),
		inst("old", S, domain.StateStopped, hash("spec-v1")),
		inst("warm", S, domain.StateReady),
		inst("hot", H, domain.StateReady),
		inst("busy", H, domain.StateRunning, job("j")),
	}
	// One hot member is enough: a member past its idle lifetime goes only
	// once the pool holds its target of ready hot instances without it.
	s := snapshotOf(domain.Target{Hot: 1, Stopped: 2}, insts, map[string]domain.CloudState{"gone": ""})
	wantPlan(t, s, "forget/gone[gone] terminate/error[err] terminate/deadline[late] "+
		"terminate/dangling[dang] terminate/idle-lifetime[idle] terminate/outdated[old] stop/warm[warm] "+
		"create/stopped×1")
	// Terminations that free quota all come before the first create.
	p := Compute(s)
	firstCreate := slices.IndexFunc(p.Steps, func(s Step) bool { return s.Action == Create })
	for i, st := range p.Steps[firstCreate:] {
		if st.Action == Terminate && st.Reason != ReasonExcess {
			t.Errorf("step %d terminates for %s after creating", firstCreate+i, st.Reason)
		}
	}
}

// Conversions come after the stops of warmed members and before the
// creates, which they spare, and the excess goes last.
func TestComputeConvertsBeforeCreating(t *testing.T) {
	H, S := domain.RoleHot, domain.RoleStopped
	insts := []domain.Instance{
		inst("old", H, domain.StateReady, hash("spec-v1")),
		inst("warm", S, domain.StateReady),
		inst("p1", S, domain.StateStopped),
		inst("p2", S, domain.StateStopped),
		inst("boot", S, domain.StateBooting),
	}
	s := snapshotOf(domain.Target{Hot: 4, Stopped: 1}, insts, nil)
	wantPlan(t, s, "terminate/outdated[old] stop/warm[warm] start/convert[p1 p2] create/hot×2 terminate/excess[boot]")
	for _, st := range Compute(s).Steps {
		if st.Action == Start && st.Role != domain.RoleHot {
			t.Errorf("start step makes its members %q, want hot", st.Role)
		}
	}
}

// A pool whose spec cannot be told converts nothing; one whose starts
// the cloud lately refused for capacity creates its hot members, but
// still parks hot members it has too many of. The members a held
// conversion would take are kept, not terminated, until the role they
// would join has its target of ready members.
func TestConversionsHeldBack(t *testing.T) {
	H, S := domain.RoleHot, domain.RoleStopped
	parked := []domain.Instance{inst("s1", S, domain.StateStopped)}
	ready := []domain.Instance{inst("h1", H, domain.StateReady)}
	parkedTwo := []domain.Instance{inst("s1", S, domain.StateStopped), inst("s2", S, domain.StateStopped)}
	cases := []struct {
		name               string
		insts              []domain.Instance
		target             domain.Target
		noConvert, noStart bool
		want               string
	}{
		{"spec unknown: no start", parked, domain.Target{Hot: 1}, true, false, "create/hot×1 kept/converts-held[s1]"},
		{"spec unknown: no stop", ready, domain.Target{Stopped: 1}, true, false, "create/stopped×1 kept/converts-held[h1]"},
		{"starts refused: hot created", parked, domain.Target{Hot: 1}, false, true, "create/hot×1 kept/starts-held[s1]"},
		{"starts refused: stops go on", ready, domain.Target{Stopped: 1}, false, true, "stop/convert[h1]"},
		{"starts refused: the parked wait while the hot members created boot",
			append([]domain.Instance{inst("n1", H, domain.StateBooting), inst("n2", H, domain.StatePending, noCloudID())}, parkedTwo...),
			domain.Target{Hot: 2}, false, true, "kept/starts-held[s1 s2]"},
		{"starts refused: as many parked wait as hot members are not ready",
			append([]domain.Instance{inst("n1", H, domain.StateReady), inst("n2", H, domain.StateBooting)}, parkedTwo...),
			domain.Target{Hot: 2}, false, true, "terminate/excess[s2] kept/starts-held[s1]"},
		{"starts refused: the parked go once the hot members created are ready",
			append([]domain.Instance{inst("n1", H, domain.StateReady), inst("n2", H, domain.StateReady)}, parkedTwo...),
			domain.Target{Hot: 2}, false, true, "terminate/excess[s1 s2]"},
		{"starts refused: parked members beyond what the targets need still go", []domain.Instance{
			inst("s1", S, domain.StateStopped, created(4*time.Hour)), inst("s2", S, domain.StateStopped, created(3*time.Hour)),
			inst("s3", S, domain.StateStopped, created(2*time.Hour)), inst("s4", S, domain.StateStopped, created(time.Hour)),
		}, domain.Target{Hot: 1, Stopped: 1}, false, true, "create/hot×1 terminate/excess[s2 s3] kept/starts-held[s1]"},
		{"starts refused: a warming stopped member is no parked one", []domain.Instance{
			inst("s1", S, domain.StateStopped), inst("s2", S, domain.StateBooting),
		}, domain.Target{Hot: 2}, false, true, "create/hot×2 terminate/excess[s2] kept/starts-held[s1]"},
		{"spec unknown: a spot hot member is not kept", []domain.Instance{inst("h1", H, domain.StateReady, onSpot())},
			domain.Target{Stopped: 1}, true, false, "create/stopped×1 terminate/excess[h1]"},
		{"spec unknown: no hot member the hot target needs ready is kept", []domain.Instance{
			inst("h1", H, domain.StateReady), inst("h2", H, domain.StateBooting),
		}, domain.Target{Hot: 1, Stopped: 1}, true, false, "create/stopped×1 terminate/excess[h2]"},
		{"spec unknown: hot members wait for the stopped members created to park", []domain.Instance{
			inst("h1", H, domain.StateReady), inst("s1", S, domain.StateBooting),
		}, domain.Target{Stopped: 1}, true, false, "kept/converts-held[h1]"},
		{"spec unknown: a target of zero keeps nothing", []domain.Instance{
			inst("h1", H, domain.StateReady), inst("s1", S, domain.StateStopped),
		}, domain.Target{}, true, false, "terminate/excess[h1] terminate/excess[s1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := snapshotOf(c.target, c.insts, nil)
			s.NoConvert, s.NoStart = c.noConvert, c.noStart
			wantPlan(t, s, c.want)
		})
	}
}

func TestCount(t *testing.T) {
	H, S := domain.RoleHot, domain.RoleStopped
	got := Count([]domain.Instance{
		inst("a", H, domain.StateReady), inst("b", H, domain.StateBooting), inst("c", S, domain.StateStopped),
		inst("d", S, domain.StateReady), inst("e", H, domain.StateClaimed, job("j")), inst("f", S, domain.StateError),
		inst("g", S, domain.StateTerminated),
	})
	want := Counts{ReadyHot: 1, Stopped: 1, Warming: 2, Detached: 1, Other: 1}
	if got != want {
		t.Fatalf("Count = %+v, want %+v", got, want)
	}
}

// A member that served a job with reuse comes back to the resource pool, not
// to its pool's count: the converger replaced it when it left, so counting it
// again would terminate a machine as excess, and parking it again would
// trade its max-age for the stopped allowance.
func TestAReusedMemberIsNotCountedAgain(t *testing.T) {
	v := domain.NewLifecycle(domain.Deadlines{})
	step := func(in domain.Instance, r domain.TransitionRequest) domain.Instance {
		t.Helper()
		out, err := domain.ApplyTransition(in, r.Guard, now, r.Apply)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, c := range []struct {
		role   domain.Role
		state  domain.State
		target domain.Target
	}{
		{domain.RoleHot, domain.StateReady, domain.Target{Hot: 1}},
		{domain.RoleStopped, domain.StateStopped, domain.Target{Stopped: 1}},
	} {
		t.Run(string(c.role), func(t *testing.T) {
			in := inst("used", c.role, c.state, created(time.Hour))
			in = step(in, v.Claim(in, "1/1", now))
			in = step(in, v.Register(in, now))
			in = step(in, v.Release(in, "", now))
			idleUntil := now.Add(10 * time.Minute)
			in = step(in, v.Pool(in, idleUntil))
			insts := []domain.Instance{in, inst("replacement", c.role, c.state)}
			if got := render(Compute(snapshotOf(c.target, insts, nil))); got != "" {
				t.Errorf("plan after the reused member came back: %s, want nothing", got)
			}
			if got := Count(insts); got.Reusable != 1 {
				t.Errorf("Count = %+v, want the reused member counted as reusable", got)
			}
			if !in.Deadline.Equal(idleUntil) {
				t.Errorf("reused member's deadline %s, want %s", in.Deadline, idleUntil)
			}
		})
	}
}
