// Package rebalance decides, as a pure function of a snapshot, what the pool
// converger must do to bring one pool to its target. The order of the plan is
// the warm-pool design's, with conversions before the creates: settle
// finished stops and forget machines gone; terminate error instances,
// instances past their deadline, dangling ones, hot ones idle past their
// lifetime and outdated ones (before creating, to free quota); re-send stops
// the cloud did not carry out and stop warmed stopped-pool members; convert
// members whose role is in excess to the role that is short (stop ready hot
// members to park them, start parked members to make them hot); create what
// is still missing; and last terminate the excess, but for the members a
// conversion held this cycle would have taken (Plan.Kept). Instances bound
// to a job are never touched.
package rebalance

import (
	"cmp"
	"slices"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Action is what a step does.
type Action string

const (
	Terminate Action = "terminate"
	Stop      Action = "stop"
	// Start starts parked members that become hot (reason convert).
	Start  Action = "start"
	Create Action = "create"
	// Forget closes rows whose machine is already gone: no cloud call.
	Forget Action = "forget"
	// Settle records what the cloud finished: a stop that completed.
	Settle Action = "settle"
)

// Reason says why a step exists; it labels logs and metrics.
type Reason string

const (
	ReasonGone         Reason = "gone"          // the cloud no longer has the machine
	ReasonStopped      Reason = "stopped"       // the cloud finished stopping it
	ReasonError        Reason = "error"         // the instance reported an error
	ReasonDeadline     Reason = "deadline"      // stuck past its state's deadline
	ReasonDangling     Reason = "dangling"      // running too long without a job
	ReasonIdleLifetime Reason = "idle-lifetime" // a hot instance idle past its lifetime
	ReasonOutdated     Reason = "outdated"      // spec hash differs from the pool's
	ReasonWarm         Reason = "warm"          // a stopped-pool member finished warm-up
	ReasonRestop       Reason = "restop"        // a stop that the cloud did not carry out
	ReasonMissing      Reason = "missing"       // below target
	ReasonExcess       Reason = "excess"        // above target
	// ReasonConvert: a member of a role in excess becomes one of the role
	// that is short (a schedule that swaps stopped for hot capacity, or
	// back), stopped or started rather than terminated and replaced.
	ReasonConvert Reason = "convert"
	// ReasonStartsHeld: members kept rather than terminated as excess,
	// because the parked members that would become hot are not started
	// this cycle (Snapshot.NoStart).
	ReasonStartsHeld Reason = "starts-held"
	// ReasonConvertsHeld: members kept rather than terminated as excess,
	// because no member changes role this cycle (Snapshot.NoConvert).
	ReasonConvertsHeld Reason = "converts-held"
)

// KeptReasons are the reasons a plan keeps members (Plan.Kept).
var KeptReasons = []Reason{ReasonStartsHeld, ReasonConvertsHeld}

// Step is one action of a plan. Terminate, Stop, Start, Forget and Settle
// steps name the instances (as read, so the applier can guard on their
// version); Create steps give a role and a count, and conversions the role
// their instances become.
type Step struct {
	Action    Action
	Reason    Reason
	Role      domain.Role
	Count     int
	Instances []domain.Instance
}

// Plan is the ordered list of steps for one pool.
type Plan struct {
	Pool  string
	Steps []Step
	// Kept are members beyond their role's target that no step touches:
	// the conversion that would take them is held this cycle (see
	// Snapshot.NoStart and NoConvert), so they are not terminated as
	// excess. Nothing is to be done with them; they are named so that
	// logs and metrics say why the pool holds more than its target.
	Kept []Kept
}

// Kept is a group of members a plan keeps (Plan.Kept), for the same
// reason, until a conversion to Role takes them or that role's target is
// met by ready members.
type Kept struct {
	Reason    Reason
	Role      domain.Role
	Instances []domain.Instance
}

// Empty reports whether the plan does nothing.
func (p Plan) Empty() bool { return len(p.Steps) == 0 }

// Snapshot is everything the plan depends on.
type Snapshot struct {
	Pool            string
	Now             time.Time
	Target          domain.Target
	SpecHash        string
	HotIdleLifetime time.Duration
	DanglingAfter   time.Duration
	// GoneGrace protects young rows from being closed because an
	// eventually consistent cloud listing does not show them yet.
	GoneGrace time.Duration
	// Instances are the pool's rows in any state.
	Instances []domain.Instance
	// Cloud is the provider's view by cloud id, when known. A nil map
	// means the view is unavailable this cycle: rows are not reconciled
	// with the cloud, but the rest of the plan still runs.
	Cloud map[string]domain.CloudInstance
	// NoConvert: no member changes role this cycle, because which members
	// are of the pool's current spec cannot be told (its image did not
	// resolve): a member of an outdated spec must not become a hot one.
	// The members a conversion would take are kept meanwhile (Plan.Kept).
	NoConvert bool
	// NoStart: no parked member is started to become hot this cycle,
	// because the cloud lately refused to start the pool's machines for
	// want of capacity: the hot members missing are created instead, and
	// a create may find another instance type or zone. The parked
	// members are kept meanwhile (Plan.Kept).
	NoStart bool
}

// Defaults for the snapshot's durations.
const (
	// DefaultDanglingAfter is the limit for a machine running
	// without a job.
	DefaultDanglingAfter = 10 * time.Minute
	DefaultGoneGrace     = 2 * time.Minute
)

// Compute returns the plan for one pool.
func Compute(s Snapshot) Plan {
	if s.DanglingAfter <= 0 {
		s.DanglingAfter = DefaultDanglingAfter
	}
	if s.GoneGrace <= 0 {
		s.GoneGrace = DefaultGoneGrace
	}
	if s.HotIdleLifetime <= 0 {
		s.HotIdleLifetime = domain.DefaultHotIdleLifetime
	}
	p := Plan{Pool: s.Pool}
	add := func(a Action, r Reason, insts []domain.Instance) {
		if len(insts) > 0 {
			p.Steps = append(p.Steps, Step{Action: a, Reason: r, Instances: insts})
		}
	}

	c := categorize(s)
	add(Settle, ReasonStopped, c.settled)
	add(Forget, ReasonGone, c.gone)
	add(Terminate, ReasonError, c.errored)
	add(Terminate, ReasonDeadline, c.expired)
	add(Terminate, ReasonDangling, c.dangling)
	add(Terminate, ReasonIdleLifetime, retirable(c.idle, c.members[domain.RoleHot], s))
	add(Terminate, ReasonOutdated, c.outdated)
	toStopped, toHot := conversions(c, s)
	members := map[domain.Role][]domain.Instance{
		domain.RoleHot:     slices.Concat(without(c.members[domain.RoleHot], toStopped), toHot),
		domain.RoleStopped: slices.Concat(without(c.members[domain.RoleStopped], toHot), toStopped),
	}
	p.Kept = heldBack(members, s)
	excess := map[domain.Role][]domain.Instance{}
	for _, role := range []domain.Role{domain.RoleHot, domain.RoleStopped} {
		if n := len(members[role]) - s.Target.For(role); n > 0 {
			spare := members[role]
			for _, k := range p.Kept {
				if k.Role != role {
					spare = without(spare, k.Instances)
					n -= len(k.Instances)
				}
			}
			excess[role] = excessVictims(spare, n)
		}
	}
	// A member about to go as excess is not worth parking first.
	victim := map[string]bool{}
	for _, v := range excess[domain.RoleStopped] {
		victim[v.ID] = true
	}
	notVictim := func(in domain.Instance) bool { return victim[in.ID] }
	add(Stop, ReasonRestop, slices.DeleteFunc(c.restop, notVictim))
	add(Stop, ReasonWarm, slices.DeleteFunc(c.warm, notVictim))
	if len(toStopped) > 0 {
		p.Steps = append(p.Steps, Step{Action: Stop, Reason: ReasonConvert, Role: domain.RoleStopped, Instances: toStopped})
	}
	if len(toHot) > 0 {
		p.Steps = append(p.Steps, Step{Action: Start, Reason: ReasonConvert, Role: domain.RoleHot, Instances: toHot})
	}

	for _, role := range []domain.Role{domain.RoleHot, domain.RoleStopped} {
		if n := s.Target.For(role) - len(members[role]); n > 0 {
			p.Steps = append(p.Steps, Step{Action: Create, Reason: ReasonMissing, Role: role, Count: n})
		}
	}
	add(Terminate, ReasonExcess, excess[domain.RoleHot])
	add(Terminate, ReasonExcess, excess[domain.RoleStopped])
	return p
}

// categories sorts a pool's rows into the rebalance groups. An instance lands in
// the first group that claims it.
type categories struct {
	gone, errored, expired, dangling, idle, outdated []domain.Instance
	settled, restop, warm                            []domain.Instance
	members                                          map[domain.Role][]domain.Instance
}

func categorize(s Snapshot) categories {
	c := categories{members: map[domain.Role][]domain.Instance{}}
	for _, in := range s.Instances {
		// Terminations under way are the terminator's; instances launched
		// for a job (role on-demand) follow their job, not the pool.
		if in.State == domain.StateTerminated || in.State == domain.StateTerminating || in.Detached() ||
			(in.Role != domain.RoleHot && in.Role != domain.RoleStopped) {
			continue
		}
		machine, known := s.Cloud[in.CloudID]
		switch {
		case gone(in, machine, known, s):
			c.gone = append(c.gone, in)
		case in.State == domain.StateError:
			c.errored = append(c.errored, in)
		case in.State == domain.StateReady && in.Role == domain.RoleHot && !s.Now.Before(in.StateSince.Add(s.HotIdleLifetime)):
			c.idle = append(c.idle, in)
		case dangling(in, s):
			c.dangling = append(c.dangling, in)
		case in.State != domain.StateReady && in.Expired(s.Now):
			c.expired = append(c.expired, in)
		case in.SpecHash != s.SpecHash:
			c.outdated = append(c.outdated, in)
		default:
			c.members[in.Role] = append(c.members[in.Role], in)
			if in.Role != domain.RoleStopped {
				continue
			}
			if in.State == domain.StateReady {
				c.warm = append(c.warm, in)
			} else if in.State == domain.StateStopping && known && machine.State == domain.CloudRunning {
				c.restop = append(c.restop, in)
			} else if in.State == domain.StateStopping && known && machine.State == domain.CloudStopped {
				c.settled = append(c.settled, in)
			}
		}
	}
	return c
}

// conversions picks the members that change role this cycle, while one
// role is in excess and the other short. Stopping a machine that is up and
// warm, or starting a parked one (in seconds, its disk already warm), costs
// far less than terminating it and launching a replacement, which boots and
// warms up from nothing (and, to be a stopped member, is stopped after).
//
// Toward stopped go ready hot members, but only those beyond the ready
// ones the hot target still needs (a hot member still booting is the one
// to go as excess), and never a spot machine, which cannot be stopped.
// Toward hot go parked members, the cloud agreeing that their machines are
// stopped (one still stopping cannot be started yet). Either way only
// members of the pool's current spec: a member of an outdated one is
// rolled, not kept. Oldest first.
func conversions(c categories, s Snapshot) (toStopped, toHot []domain.Instance) {
	if s.NoConvert {
		return nil, nil
	}
	hot, stopped := c.members[domain.RoleHot], c.members[domain.RoleStopped]
	excessHot, excessStopped := len(hot)-s.Target.Hot, len(stopped)-s.Target.Stopped
	if n := min(excessHot, -excessStopped); n > 0 {
		toStopped = oldest(stoppable(hot, s), min(n, inState(hot, domain.StateReady)-s.Target.Hot))
	}
	if n := min(excessStopped, -excessHot); n > 0 && !s.NoStart {
		toHot = oldest(startable(stopped, s), n)
	}
	return toStopped, toHot
}

// stoppable is those of hot that can be parked: ready members of the
// pool's spec, on on-demand machines the cloud agrees are running.
func stoppable(hot []domain.Instance, s Snapshot) []domain.Instance {
	var out []domain.Instance
	for _, in := range hot {
		machine, known := s.Cloud[in.CloudID]
		if in.State == domain.StateReady && in.SpecHash == s.SpecHash && !spot(in, machine) &&
			(s.Cloud == nil || known && machine.State == domain.CloudRunning) {
			out = append(out, in)
		}
	}
	return out
}

// startable is those of stopped that can be started: parked members of
// the pool's spec whose machines the cloud agrees are stopped.
func startable(stopped []domain.Instance, s Snapshot) []domain.Instance {
	var out []domain.Instance
	for _, in := range stopped {
		machine, known := s.Cloud[in.CloudID]
		if in.State == domain.StateStopped && in.SpecHash == s.SpecHash && (s.Cloud == nil || known && machine.State == domain.CloudStopped) {
			out = append(out, in)
		}
	}
	return out
}

// heldBack returns the members kept rather than terminated as excess,
// members being the roles' members once this cycle's conversions are
// done. While a conversion toward a role is held (no start, or no
// conversion at all), the members of the other role it would take are
// all that can stand in for the members that role misses: a create may
// find no capacity either, or its machine never warm, and terminating
// them would leave the pool with neither. So as many as the role lacks
// ready members (for the stopped role, parked ones) are kept, oldest
// first, as a conversion would take them; they go as excess at the first
// cycle that finds the role's target met by ready members, unless a
// cycle without the hold converts them first. Members beyond those, a
// parked set larger than any target needs, still go as excess.
func heldBack(members map[domain.Role][]domain.Instance, s Snapshot) []Kept {
	hot, stopped := members[domain.RoleHot], members[domain.RoleStopped]
	var kept []Kept
	keep := func(why Reason, role domain.Role, candidates []domain.Instance, n int) {
		if insts := oldest(candidates, n); len(insts) > 0 {
			kept = append(kept, Kept{Reason: why, Role: role, Instances: insts})
		}
	}
	if s.NoConvert || s.NoStart {
		why := ReasonStartsHeld
		if s.NoConvert {
			why = ReasonConvertsHeld
		}
		n := min(len(stopped)-s.Target.Stopped, s.Target.Hot-inState(hot, domain.StateReady))
		keep(why, domain.RoleHot, startable(stopped, s), n)
	}
	if s.NoConvert {
		// As a conversion would, only ready members beyond those the hot
		// target needs.
		ready := inState(hot, domain.StateReady)
		n := min(len(hot)-s.Target.Hot, ready-s.Target.Hot, s.Target.Stopped-inState(stopped, domain.StateStopped))
		keep(ReasonConvertsHeld, domain.RoleStopped, stoppable(hot, s), n)
	}
	return kept
}

// inState counts the instances of insts in state st.
func inState(insts []domain.Instance, st domain.State) int {
	n := 0
	for _, in := range insts {
		if in.State == st {
			n++
		}
	}
	return n
}

// spot reports whether an instance's machine is a spot one, as its row
// (the create call's answer) or the cloud's listing says.
func spot(in domain.Instance, machine domain.CloudInstance) bool {
	return in.UsageClass == usageSpot || machine.UsageClass == usageSpot
}

// usageSpot is the usage class of a spot machine.
const usageSpot = "spot"

// oldest returns the n first created of insts (none when n <= 0).
func oldest(insts []domain.Instance, n int) []domain.Instance {
	if n <= 0 || len(insts) == 0 {
		return nil
	}
	sorted := slices.Clone(insts)
	slices.SortStableFunc(sorted, func(a, b domain.Instance) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return sorted[:min(n, len(sorted))]
}

// without is insts less those in drop (by id).
func without(insts, drop []domain.Instance) []domain.Instance {
	if len(drop) == 0 {
		return insts
	}
	ids := make(map[string]bool, len(drop))
	for _, in := range drop {
		ids[in.ID] = true
	}
	return slices.DeleteFunc(slices.Clone(insts), func(in domain.Instance) bool { return ids[in.ID] })
}

// retirable picks, of the hot members idle past their lifetime, those to
// terminate now. Such members no longer count toward the target, so the
// plan creates their replacements; each one is kept until a ready
// replacement takes its place: only as many go as leave the pool with at
// least its target of ready hot instances, the longest idle first. (A kept
// member serves and survives only while its row's deadline allows: the
// reaper ends a row past it.)
//
// Members warmed together expire together: retiring them all at once leaves
// the pool without a ready instance for as long as their replacements boot,
// every lifetime, and retiring them while the cloud refuses the
// replacements (a capacity shortage) empties the pool for nothing. Retiring
// one per cycle instead would still do both to a pool of one. Keeping them
// costs an extra machine per expired member for one boot per lifetime.
// A member of another spec hash can serve no job of the pool, so it is not
// kept.
func retirable(idle, members []domain.Instance, s Snapshot) []domain.Instance {
	ready := 0
	for _, in := range members {
		if in.State == domain.StateReady {
			ready++
		}
	}
	var keepable, out []domain.Instance
	for _, in := range idle {
		if in.SpecHash == s.SpecHash {
			keepable = append(keepable, in)
		} else {
			out = append(out, in)
		}
	}
	keep := min(len(keepable), max(s.Target.Hot-ready, 0))
	slices.SortStableFunc(keepable, func(a, b domain.Instance) int {
		return cmp.Or(a.StateSince.Compare(b.StateSince), cmp.Compare(a.ID, b.ID))
	})
	return append(out, keepable[:len(keepable)-keep]...)
}

// gone: domain.MachineGone, when the snapshot has a cloud listing.
func gone(in domain.Instance, m domain.CloudInstance, known bool, s Snapshot) bool {
	return s.Cloud != nil && domain.MachineGone(in, m, known, s.Now, s.GoneGrace)
}

// dangling: a machine that has been running for DanglingAfter without a job
// and is not a hot member within its idle lifetime — a warm-up that never
// finished, or a stopped-pool member that was never parked.
func dangling(in domain.Instance, s Snapshot) bool {
	running := in.State == domain.StateBooting || (in.State == domain.StateReady && in.Role != domain.RoleHot)
	return running && !in.RunningSince.IsZero() && !s.Now.Before(in.RunningSince.Add(s.DanglingAfter))
}

// progress ranks how far an instance is from being useful; the excess is
// taken from the least useful first.
func progress(s domain.State) int {
	switch s {
	case domain.StatePending:
		return 0
	case domain.StateBooting:
		return 1
	case domain.StateReady, domain.StateStopping:
		return 2
	}
	return 3 // stopped
}

func excessVictims(members []domain.Instance, n int) []domain.Instance {
	sorted := slices.Clone(members)
	slices.SortStableFunc(sorted, func(a, b domain.Instance) int {
		return cmp.Or(
			cmp.Compare(progress(a.State), progress(b.State)),
			a.CreatedAt.Compare(b.CreatedAt),
			cmp.Compare(a.ID, b.ID),
		)
	})
	return sorted[:n]
}

// Counts summarises a pool's rows by role and state, for status and display.
type Counts struct {
	ReadyHot int `json:"ready_hot"`
	Stopped  int `json:"stopped"`
	Warming  int `json:"warming"`  // pending or booting, or warmed and waiting to stop
	Detached int `json:"detached"` // bound to a job
	Other    int `json:"other"`    // stopping, error, terminating
	// Reusable counts idle instances waiting in the resource pool that are
	// not pool members: launched for the pool's jobs, or members released
	// after a job.
	Reusable int `json:"reusable"`
}

// Count tallies instances of one pool.
func Count(insts []domain.Instance) Counts {
	var c Counts
	for _, in := range insts {
		member := in.Role == domain.RoleHot || in.Role == domain.RoleStopped
		switch {
		case in.State == domain.StateTerminated:
		case in.Detached():
			c.Detached++
		case !member:
			if in.State == domain.StateReady {
				c.Reusable++
			}
		case in.State == domain.StateReady && in.Role == domain.RoleHot:
			c.ReadyHot++
		case in.State == domain.StateStopped:
			c.Stopped++
		case in.State == domain.StatePending, in.State == domain.StateBooting, in.State == domain.StateReady:
			c.Warming++
		default:
			c.Other++
		}
	}
	return c
}
