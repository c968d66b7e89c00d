// Package storetest is the contract every domain.Store backend must meet.
// Each backend's tests call Run with a function that opens a fresh, empty
// store, so the embedded SQLite store and the real ones (DynamoDB,
// PostgreSQL) cannot drift apart.
//
// The suite assumes nothing about how a backend stores data. It does assume
// that times survive to the microsecond (PostgreSQL's precision) and come
// back in UTC; the virtual clock it hands to open starts and moves on whole
// microseconds.
package storetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Opener opens a new, empty store whose timestamps come from clk. The suite
// closes it when the subtest ends (Close must be idempotent); open may
// register its own cleanup for anything else, such as a table to drop.
type Opener func(t *testing.T, clk *clock.Virtual) domain.Store

// start is where every subtest's clock begins: not on a whole second, so a
// backend that drops sub-second precision fails.
var start = time.Date(2025, 5, 31, 12, 0, 0, 123456000, time.UTC)

type contract struct {
	name string
	run  func(t *testing.T, e *env)
}

// Run runs the whole contract suite against the stores open returns.
func Run(t *testing.T, open Opener) {
	RunInstances(t, open)
	RunHeartbeats(t, open)
	RunJobs(t, open)
	RunChanges(t, open)
	RunLeases(t, open)
	RunConfigurations(t, open)
	RunInterruptions(t, open)
}

// RunInstances is the contract of domain.Instances (concurrent claims and
// batches included).
func RunInstances(t *testing.T, open Opener) { run(t, open, suite.instances) }

// RunHeartbeats is the contract of domain.Heartbeats.
func RunHeartbeats(t *testing.T, open Opener) { run(t, open, suite.heartbeats) }

// RunJobs is the contract of domain.Jobs.
func RunJobs(t *testing.T, open Opener) { run(t, open, suite.jobs) }

// RunChanges is the contract of domain.Changes.
func RunChanges(t *testing.T, open Opener) { run(t, open, suite.changes) }

// RunConfigurations is the contract of domain.Configurations.
func RunConfigurations(t *testing.T, open Opener) { run(t, open, suite.configurations) }

// RunInterruptions is the contract of domain.Interruptions.
func RunInterruptions(t *testing.T, open Opener) { run(t, open, suite.interruptions) }

// RunLeases is the contract of domain.Leases and domain.PoolStatuses.
func RunLeases(t *testing.T, open Opener) { run(t, open, suite.leases) }

func run(t *testing.T, open Opener, contracts []contract) {
	for _, c := range contracts {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewVirtual(start)
			s := open(t, clk)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			c.run(t, &env{t: t, s: s, clk: clk, ctx: t.Context()})
		})
	}
}

// suite lists every contract in one place, grouped by the part of
// domain.Store it holds a backend to, which the RunX above each run.
var suite = struct {
	instances, heartbeats, jobs, changes, configurations, interruptions, leases []contract
}{
	instances: []contract{
		{"CreateThenGetRoundTripsEveryField", testCreateRoundTrip},
		{"CreateStampsBookkeepingFromClock", testCreateStamps},
		{"CreateNothingIsNoOp", testCreateNothing},
		{"CreateTakenIDRollsBackBatch", testCreateTaken},
		{"CreateInvalidRowsRefused", testCreateInvalid},
		{"GetUnknownIsNotFound", testGetUnknown},
		{"ListFilters", testListFilters},
		{"ListExpiredAt", testListExpiredAt},
		{"ListOrdersByCreatedThenID", testListOrder},
		{"ListNewestFirstAndLimit", testListNewestAndLimit},
		{"ListAfterAPosition", testListAfter},
		{"ListPagesListEveryInstanceOnceInOrder", testListPages},
		{"ListPagesOldestFirstAsInstancesComeAndGo", testListPagesWhileChanging(false, "c", "m", "a", "b", "k", "n", "o")},
		{"ListPagesNewestFirstAsInstancesComeAndGo", testListPagesWhileChanging(true, "k", "b", "a")},
		{"DeleteTerminated", testDeleteTerminated},
		{"DeleteRefusesLiveRowsAndDeletesNothing", testDeleteRefuses},
		{"RunnerRegistrationStoredFaithfully", testRunnerRoundTrip},
		{"ErrorsNeverCarryRunnerConfig", testErrorsRedacted},
		// Transitions, one at a time.
		{"TransitionClaimsReadyInstance", testTransitionClaims},
		{"TransitionGuardsStateJobAndVersion", testTransitionGuards},
		{"TransitionRefusesIllegalChanges", testTransitionIllegal},
		{"TransitionUnknownIsNotFound", testTransitionNotFound},
		{"TransitionRewritesInPlace", testTransitionInPlace},
		{"TransitionKeepsBookkeepingForStore", testTransitionBookkeeping},
		{"TransitionWritesEveryField", testTransitionEveryField},
		{"TransitionLifecycleVersionsAndStateSince", testTransitionLifecycle},
		// Transitions in a batch.
		{"BatchMixedOutcomesInRequestOrder", testBatchMixed},
		{"BatchOfNothing", testBatchEmpty},
		{"BatchSameInstanceTwiceOneWins", testBatchSameInstanceTwice},
		// Callers racing each other.
		{"ConcurrentClaimsHaveOneWinner", testConcurrentClaims},
		{"ConcurrentBatchesNeverClaimTwice", testConcurrentBatches},
	},
	heartbeats: []contract{
		{"HeartbeatRecordedWithoutTransition", testHeartbeatRecorded},
		{"HeartbeatNeverMovesBack", testHeartbeatMonotonic},
		{"HeartbeatUnknownInstanceIsNotFound", testHeartbeatUnknown},
		{"HeartbeatSurvivesTransitions", testHeartbeatThroughTransition},
		{"HeartbeatsInOneBatch", testHeartbeatsBatch},
	},
	jobs: []contract{
		{"JobCreateThenGetRoundTripsEveryField", testJobRoundTrip},
		{"JobCreateStampsBookkeepingFromClock", testJobCreateStamps},
		{"JobCreateLeavesExistingIDsUntouched", testJobCreateExisting},
		{"JobCreateNothingIsNoOp", testJobCreateNothing},
		{"JobCreateInvalidRefusedWholly", testJobCreateInvalid},
		{"JobGetUnknownIsNotFound", testJobGetUnknown},
		{"JobListFilters", testJobListFilters},
		{"JobListOrderAndLimit", testJobListOrder},
		{"JobListAfterAPosition", testJobListAfter},
		{"JobListPagesListEveryJobOnceInOrder", testJobListPages},
		{"JobListPagesOldestFirstAsJobsComeAndGo", testJobListPagesWhileChanging(false, 9, 10, 5, 40, 7, 100, 101)},
		{"JobListPagesNewestFirstAsJobsComeAndGo", testJobListPagesWhileChanging(true, 7, 40, 5)},
		{"JobDeleteRemovesOnlyOldFinalJobs", testJobDelete},
		// Transitions, one at a time and in a batch.
		{"JobTransitionAssignsQueuedJob", testJobTransitionAssigns},
		{"JobTransitionGuardsStatusAndVersion", testJobTransitionGuards},
		{"JobTransitionRefusesIllegalChanges", testJobTransitionIllegal},
		{"JobReadmissionQueuesARejectedJobOnce", testJobReadmission},
		{"JobTransitionUnknownIsNotFound", testJobTransitionNotFound},
		{"JobTransitionKeepsBookkeepingForStore", testJobTransitionBookkeeping},
		{"JobTransitionWritesEveryField", testJobTransitionEveryField},
		{"JobBatchMixedOutcomesInRequestOrder", testJobBatchMixed},
		{"JobBatchOfNothing", testJobBatchEmpty},
		{"JobBatchSameJobTwiceOneWins", testJobBatchSameJobTwice},
		// Callers racing each other.
		{"ConcurrentJobAssignmentsHaveOneWinner", testConcurrentJobAssignments},
		{"ConcurrentJobCreatesDedupe", testConcurrentJobCreates},
		{"ConcurrentJobBatchesNeverAssignTwice", testConcurrentJobBatches},
	},
	changes: []contract{
		{"CommitWritesInstancesAndJobsTogether", testCommitWritesAll},
		{"CommitRefusedWritesNothing", testCommitRefusedWritesNothing},
		{"CommitAppliesRequestsInOrder", testCommitInOrder},
		{"CommitOfNothing", testCommitEmpty},
		{"ConcurrentCommitsBindAJobOnce", testConcurrentCommits},
		{"CommitEachRefusesOnlyTheChangeThatFails", testCommitEach},
		{"CommitEachOfNothing", testCommitEachEmpty},
	},
	configurations: []contract{
		{"ConfigurationRoundTripAndReplace", testConfigurationRoundTrip},
		{"ConfigurationsAreKeptPerSource", testConfigurationSources},
		{"ConfigurationRefusedNamesTheProblem", testConfigurationRefused},
	},
	interruptions: []contract{
		{"InterruptionsListedSinceInOrder", testInterruptionsSince},
		{"InterruptionRecordedTwiceIsKeptOnce", testInterruptionTwice},
		{"InterruptionsExpire", testInterruptionsExpire},
		{"InterruptionRefusedNamesTheProblem", testInterruptionRefused},
		{"InterruptionsAfterClose", testInterruptionsAfterClose},
	},
	leases: []contract{
		{"LeaseAcquireRenewExpireRelease", testLeaseLifecycle},
		{"LeasesAreIndependentByName", testLeaseNames},
		{"ConcurrentLeaseAcquiresHaveOneWinner", testConcurrentLeases},
		{"PoolStatusRoundTrip", testPoolStatus},
		{"CloseIsIdempotentAndFinal", testClose},
	},
}

// env is one subtest's store, clock and context, with helpers that fail the
// test on unexpected errors.
type env struct {
	t   *testing.T
	s   domain.Store
	clk *clock.Virtual
	ctx context.Context
}

func (e *env) create(insts ...domain.Instance) {
	e.t.Helper()
	if err := e.s.CreateInstances(e.ctx, insts); err != nil {
		e.t.Fatalf("create instances: %v", err)
	}
}

func (e *env) get(id string) domain.Instance {
	e.t.Helper()
	return must[domain.Instance](e, "get %s", id)(e.s.GetInstance(e.ctx, id))
}

func (e *env) list(f domain.InstanceFilter) []domain.Instance {
	e.t.Helper()
	return must[[]domain.Instance](e, "list %+v", f)(e.s.ListInstances(e.ctx, f))
}

// move applies a transition that must succeed.
func (e *env) move(id string, g domain.Guard, fn func(*domain.Instance)) domain.Instance {
	e.t.Helper()
	return must[domain.Instance](e, "transition %s", id)(e.s.Transition(e.ctx, id, g, fn))
}

// must passes on the result of a store call that has to succeed, and
// otherwise fails the test naming the call.
func must[T any](e *env, format string, args ...any) func(T, error) T {
	return func(v T, err error) T {
		e.t.Helper()
		if err != nil {
			e.t.Fatalf(format+": %v", append(args, err)...)
		}
		return v
	}
}

// unchanged fails unless the stored row still equals before.
func (e *env) unchanged(before domain.Instance) {
	e.t.Helper()
	sameInstance(e.t, "row after refused change", e.get(before.ID), before)
}

// secretConfig is the RunnerConfig of every instance fixture: a credential
// that must never appear in an error.
const secretConfig = "jit-config-SECRET-do-not-log"

// instance returns a row in state with every field set, so that a backend
// that forgets a column fails the round trip. Deadline and RunningSince are
// in a zone other than UTC to check that they come back in UTC.
func instance(id string, state domain.State) domain.Instance {
	zone := time.FixedZone("UTC+2", 2*60*60)
	return domain.Instance{
		ID: id, CloudID: "i-" + id, Pool: "linux", Role: domain.RoleHot,
		Runner: "small", SpecHash: "abc123def456", LaunchID: "launch-" + id,
		State: state, JobStarted: false,
		Deadline:     start.Add(10*time.Minute + 250*time.Microsecond).In(zone),
		RunningSince: start.Add(-3*time.Second - 17*time.Microsecond).In(zone),
		JobsServed:   2, Reason: "because",
		InstanceType: "c6i.large", UsageClass: "spot", CPU: 2, MemoryMiB: 4096,
		Heartbeat:  start.Add(-1*time.Second - 3*time.Microsecond).In(zone),
		RunnerName: "bp-" + id + "-42", RunnerConfig: secretConfig,
	}
}

// claim is the idle→claimed mutation: bind the instance to job.
func claim(job string) func(*domain.Instance) {
	return func(i *domain.Instance) { i.State, i.Job = domain.StateClaimed, job }
}

func to(s domain.State) func(*domain.Instance) {
	return func(i *domain.Instance) { i.State = s }
}

var readyUnbound = domain.Guard{State: domain.StateReady}

// created is what a store holds after CreateInstances at now: the caller's
// fields plus the store's bookkeeping.
func created(in domain.Instance, now time.Time) domain.Instance {
	in.Version = 1
	in.CreatedAt, in.UpdatedAt, in.StateSince = now, now, now
	return in
}

// sameInstance fails unless got equals want field by field, times compared
// as instants. Times in got must be in UTC (or zero).
func sameInstance(t *testing.T, what string, got, want domain.Instance) {
	t.Helper()
	sameFields(t, what, want.ID, got, want, "RunnerConfig")
}

// sameFields fails unless got equals want field by field: times as
// instants, and in got in UTC (or zero). A redacted field's values are
// never shown.
func sameFields[T any](t *testing.T, what string, id any, got, want T, redacted ...string) {
	t.Helper()
	var b strings.Builder
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for k := range gv.NumField() {
		name := gv.Type().Field(k).Name
		g, w := gv.Field(k).Interface(), wv.Field(k).Interface()
		if gt, ok := g.(time.Time); ok {
			wt := w.(time.Time)
			if !gt.Equal(wt) {
				fmt.Fprintf(&b, "  %s: %v / %v\n", name, gt, wt)
			} else if !gt.IsZero() && gt.Location() != time.UTC {
				fmt.Fprintf(&b, "  %s: %v is not in UTC\n", name, gt)
			}
			continue
		}
		if !reflect.DeepEqual(g, w) {
			if slices.Contains(redacted, name) {
				g, w = "(differs)", "(redacted)"
			}
			fmt.Fprintf(&b, "  %s: %#v / %#v\n", name, g, w)
		}
	}
	if b.Len() > 0 {
		t.Fatalf("%s %v differs (got / want):\n%s", what, id, b.String())
	}
}

// ids lists the ids of insts in order.
func ids(insts []domain.Instance) []string {
	out := make([]string, len(insts))
	for k, i := range insts {
		out[k] = i.ID
	}
	return out
}
