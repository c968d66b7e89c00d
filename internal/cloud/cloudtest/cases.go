package cloudtest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func testCreateTaggedThenListByTag(f *fixture) {
	a := f.create(3, f.tags(domain.TagPool, "a"), "")
	b := f.create(2, f.tags(domain.TagPool, "b"), "")
	for _, m := range append(a, b...) {
		if m.UsageClass != "on-demand" {
			f.t.Errorf("%s: usage class %q, want on-demand", m.ID, m.UsageClass)
		}
	}
	checkIDs(f.t, "list by pool a", f.list(domain.CloudFilter{Tags: f.tags(domain.TagPool, "a")}), ids(a))
	checkIDs(f.t, "list by pool b", f.list(domain.CloudFilter{Tags: f.tags(domain.TagPool, "b")}), ids(b))
	checkIDs(f.t, "list by controller", f.list(domain.CloudFilter{Tags: f.tags()}), ids(a), ids(b))
	checkIDs(f.t, "list by unused pool", f.list(domain.CloudFilter{Tags: f.tags(domain.TagPool, "c")}))
	for _, m := range f.list(domain.CloudFilter{Tags: f.tags(domain.TagPool, "a")}) {
		checkTags(f.t, m, f.tags(domain.TagPool, "a"))
	}
}

func testListByIDs(f *fixture) {
	ms := f.create(3, f.tags(), "")
	want := []string{ms[0].ID, ms[2].ID}
	got := f.list(domain.CloudFilter{IDs: want})
	checkIDs(f.t, "list by ids", got, want)
	for _, m := range got {
		checkTags(f.t, m, f.tags())
	}
	checkIDs(f.t, "list by id and matching tag",
		f.list(domain.CloudFilter{IDs: want[:1], Tags: f.tags()}), want[:1])
	checkIDs(f.t, "list by id and other tag",
		f.list(domain.CloudFilter{IDs: want[:1], Tags: map[string]string{domain.TagController: f.controller + "-x"}}))
}

func testTagAddsAndOverwrites(f *fixture) {
	ms := f.create(2, f.tags(domain.TagPool, "a"), "")
	tagged, other := ms[0], ms[1]
	add := map[string]string{domain.TagStatus: "detached", domain.TagPool: "b"}
	if err := f.cloud.Tag(f.ctx, []string{tagged.ID}, add); err != nil {
		f.t.Fatalf("Tag: %v", err)
	}
	got := f.list(domain.CloudFilter{IDs: []string{tagged.ID}})
	checkIDs(f.t, "list tagged", got, []string{tagged.ID})
	checkTags(f.t, got[0], f.tags(domain.TagStatus, "detached", domain.TagPool, "b"))

	got = f.list(domain.CloudFilter{IDs: []string{other.ID}})
	checkTags(f.t, got[0], f.tags(domain.TagPool, "a"))
	if _, ok := got[0].Tags[domain.TagStatus]; ok {
		f.t.Errorf("%s: untagged machine has %s", other.ID, domain.TagStatus)
	}
	checkIDs(f.t, "list by new tag",
		f.list(domain.CloudFilter{Tags: f.tags(domain.TagStatus, "detached")}), []string{tagged.ID})
	checkIDs(f.t, "list by old value",
		f.list(domain.CloudFilter{Tags: f.tags(domain.TagPool, "a")}), []string{other.ID})
}

func testStopThenStart(f *fixture) {
	ms := f.create(2, f.tags(), "")
	f.waitState(ms, domain.CloudRunning)

	f.change("Stop", f.cloud.Stop, ms, domain.CloudStopping, domain.CloudStopped)
	f.change("Start", f.cloud.Start, ms, domain.CloudPending, domain.CloudRunning)
	checkIDs(f.t, "list by tag after restart", f.list(domain.CloudFilter{Tags: f.tags()}), ids(ms))
}

// change calls op, named name, on ms and wants each machine on its way
// (passing) or at target, then waits for target: calling op again then
// succeeds and changes nothing.
func (f *fixture) change(name string, op func(context.Context, []string) error, ms []domain.CloudInstance, passing, target domain.CloudState) {
	f.t.Helper()
	if err := op(f.ctx, ids(ms)); err != nil {
		f.t.Fatalf("%s: %v", name, err)
	}
	for _, m := range f.list(domain.CloudFilter{IDs: ids(ms)}) {
		checkState(f.t, m, passing, target)
	}
	f.waitState(ms, target)
	if err := op(f.ctx, ids(ms)); err != nil {
		f.t.Fatalf("%s of %s machines: %v", name, target, err)
	}
}

func testTerminateLeavesTagListings(f *fixture) {
	ms := f.create(3, f.tags(), "")
	gone, kept := ids(ms[:2]), ids(ms[2:])
	if err := f.cloud.Terminate(f.ctx, gone); err != nil {
		f.t.Fatalf("Terminate: %v", err)
	}
	for _, m := range f.list(domain.CloudFilter{IDs: gone}) {
		checkState(f.t, m, domain.CloudShuttingDown, domain.CloudTerminated)
	}
	f.waitListed(kept)
	f.waitState(ms[:2], domain.CloudTerminated)
	checkIDs(f.t, "terminated machines by id", f.list(domain.CloudFilter{IDs: gone}), gone)
	if err := f.cloud.Terminate(f.ctx, gone); err != nil {
		f.t.Fatalf("Terminate of terminated machines: %v", err)
	}
}

func testBatchOfMaxBatch(f *fixture) {
	ms := f.create(domain.MaxBatch, f.tags(), "")
	if err := f.cloud.Tag(f.ctx, ids(ms), map[string]string{domain.TagRole: "hot"}); err != nil {
		f.t.Fatalf("Tag %d: %v", len(ms), err)
	}
	checkIDs(f.t, "list by new tag", f.list(domain.CloudFilter{Tags: f.tags(domain.TagRole, "hot")}), ids(ms))
	if err := f.cloud.Terminate(f.ctx, ids(ms)); err != nil {
		f.t.Fatalf("Terminate %d: %v", len(ms), err)
	}
	f.waitListed(nil)
}

func testUnknownIDsAreErrors(f *fixture) {
	unknown := []string{UnknownID}
	checkUnknown(f.t, "Start", f.cloud.Start(f.ctx, unknown))
	checkUnknown(f.t, "Stop", f.cloud.Stop(f.ctx, unknown))
	checkUnknown(f.t, "Terminate", f.cloud.Terminate(f.ctx, unknown))
	checkUnknown(f.t, "Tag", f.cloud.Tag(f.ctx, unknown, f.tags()))
	_, err := f.cloud.List(f.ctx, domain.CloudFilter{IDs: unknown})
	checkUnknown(f.t, "List", err)
}

// A machine gone does not hold back the rest of its batch: the known ids
// are acted on, and the error names the unknown one.
func testMixedUnknownIDActsOnTheOthers(f *fixture) {
	ms := f.create(2, f.tags(), "")
	tagged := []string{ms[0].ID, UnknownID}
	checkUnknownNamed(f.t, "Tag known and unknown", f.cloud.Tag(f.ctx, tagged, map[string]string{domain.TagRole: "x"}))
	checkUnknownNamed(f.t, "Terminate known and unknown", f.cloud.Terminate(f.ctx, []string{ms[1].ID, UnknownID}))
	got := f.list(domain.CloudFilter{IDs: ids(ms)})
	if got[0].Tags[domain.TagRole] != "x" {
		f.t.Errorf("%s was not tagged beside an unknown id", ms[0].ID)
	}
	checkState(f.t, got[1], domain.CloudShuttingDown, domain.CloudTerminated)
}

func checkUnknownNamed(t *testing.T, what string, err error) {
	t.Helper()
	checkUnknown(t, what, err)
	if ids := domain.UnknownIDs(err); !slices.Equal(ids, []string{UnknownID}) {
		t.Errorf("%s: error names %v as unknown, want [%s]", what, ids, UnknownID)
	}
}

func testClientTokenIsIdempotent(f *fixture) {
	token := f.controller + "-token"
	first := f.create(2, f.tags(), token)
	again := f.create(2, f.tags(), token)
	checkIDs(f.t, "repeated create", again, ids(first))
	checkIDs(f.t, "list by tag", f.list(domain.CloudFilter{Tags: f.tags()}), ids(first))
}

func testResolveImage(f *fixture) {
	id, err := f.cloud.ResolveImage(f.ctx, Image, domain.RunnerSpec{})
	if err != nil || id == "" {
		f.t.Fatalf("ResolveImage(%q) = %q, %v", Image, id, err)
	}
	again, err := f.cloud.ResolveImage(f.ctx, Image, domain.RunnerSpec{})
	if err != nil || again != id {
		f.t.Errorf("ResolveImage again = %q, %v; want %q", again, err, id)
	}
	if _, err := f.cloud.ResolveImage(f.ctx, "", domain.RunnerSpec{}); !errors.Is(err, domain.ErrUnknownImage) {
		f.t.Errorf("ResolveImage(\"\") = %v, want ErrUnknownImage", err)
	}
}
