package provision

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestRequirementsOfASpec(t *testing.T) {
	tests := []struct {
		name string
		spec domain.RunnerSpec
		want Requirements
	}{
		{"bare spec: on-demand, nothing else constrained", domain.RunnerSpec{}, Requirements{UsageClass: "on-demand"}},
		{"a spot job takes an idle machine of either kind", domain.RunnerSpec{Spot: "price-capacity-optimized"}, Requirements{UsageClass: ""}},
		{"ram in GiB becomes MiB", domain.RunnerSpec{CPU: domain.Range{Min: 2, Max: 4}, RAM: domain.Range{Min: 4, Max: 16}},
			Requirements{UsageClass: "on-demand", CPU: domain.Range{Min: 2, Max: 4}, MemMiB: domain.Range{Min: 4096, Max: 16384}}},
		{"a family matches every size of it; sizes and patterns stay as written",
			domain.RunnerSpec{Family: []string{"c7a", "m7a.2xlarge", "r7*", "", "c6?.large"}},
			Requirements{UsageClass: "on-demand", InstanceTypes: []string{"c7a*", "m7a.2xlarge", "r7*", "c6?.large"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RequirementsOf(tt.spec)
			if got.UsageClass != tt.want.UsageClass || got.CPU != tt.want.CPU || got.MemMiB != tt.want.MemMiB ||
				got.ResourceClass != tt.want.ResourceClass || !slices.Equal(got.InstanceTypes, tt.want.InstanceTypes) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRequirementsAcceptEntries(t *testing.T) {
	now := t0
	entry := domain.ResourcePoolEntry{InstanceID: "bp-1", UsageClass: "on-demand", InstanceType: "c7a.xlarge",
		CPU: 4, Mem: 8192, ResourceClass: "medium", Threshold: now.Add(time.Minute)}
	base := Requirements{UsageClass: "on-demand"}
	tests := []struct {
		name string
		req  func(*Requirements)
		e    func(*domain.ResourcePoolEntry)
		why  string // "" when accepted
	}{
		{"matching entry", nil, nil, ""},
		{"no threshold never expires", nil, func(e *domain.ResourcePoolEntry) { e.Threshold = time.Time{} }, ""},
		{"expired at its threshold", nil, func(e *domain.ResourcePoolEntry) { e.Threshold = now }, "expired"},
		{"expired wins over every other miss", func(r *Requirements) { r.UsageClass = "spot" },
			func(e *domain.ResourcePoolEntry) { e.Threshold = now.Add(-time.Second) }, "expired"},
		{"spot job, on-demand entry", func(r *Requirements) { r.UsageClass = "spot" }, nil, "usage class"},
		{"no usage class asked takes either", func(r *Requirements) { r.UsageClass = "" },
			func(e *domain.ResourcePoolEntry) { e.UsageClass = "spot" }, ""},
		{"cpu below min", func(r *Requirements) { r.CPU = domain.Range{Min: 8} }, nil, "cpu"},
		{"cpu above max", func(r *Requirements) { r.CPU = domain.Range{Max: 2} }, nil, "cpu"},
		{"cpu within range", func(r *Requirements) { r.CPU = domain.Range{Min: 2, Max: 4} }, nil, ""},
		{"memory below min", func(r *Requirements) { r.MemMiB = domain.Range{Min: 16384} }, nil, "memory"},
		{"memory above max", func(r *Requirements) { r.MemMiB = domain.Range{Max: 4096} }, nil, "memory"},
		{"resource class differs", func(r *Requirements) { r.ResourceClass = "large" }, nil, "resource class"},
		{"resource class matches", func(r *Requirements) { r.ResourceClass = "medium" }, nil, ""},
		{"family pattern matches", func(r *Requirements) { r.InstanceTypes = []string{"m7a*", "c7a*"} }, nil, ""},
		{"family pattern misses", func(r *Requirements) { r.InstanceTypes = []string{"m7a*"} }, nil, "instance type"},
		{"exact type misses another size", func(r *Requirements) { r.InstanceTypes = []string{"c7a.large"} }, nil, "instance type"},
		{"a malformed pattern matches nothing", func(r *Requirements) { r.InstanceTypes = []string{"c7a["} }, nil, "instance type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, e := base, entry
			if tt.req != nil {
				tt.req(&r)
			}
			if tt.e != nil {
				tt.e(&e)
			}
			ok, why := r.Accepts(e, now)
			if ok != (tt.why == "") || why != tt.why {
				t.Fatalf("Accepts = %v, %q; want reason %q", ok, why, tt.why)
			}
		})
	}
}

func newSearch(spec domain.RunnerSpec) *search {
	return &search{req: RequirementsOf(spec), seen: map[string]int{}}
}

func TestPickupTakesAMatchOffTheQueue(t *testing.T) {
	f := newFixture(t)
	in := f.reusable(small, 1, nil)[0]
	e, exhausted, err := f.p.pickupFor("small").next(f.Ctx, newSearch(small))
	if err != nil || e == nil || exhausted != "" {
		t.Fatalf("next = %+v, %q, %v", e, exhausted, err)
	}
	if *e != entryOf(in) {
		t.Fatalf("entry %+v, want %+v", *e, entryOf(in))
	}
	// Deleted at once, not merely hidden: no other pickup can see it again.
	if st := f.Stats(domain.ResourcePoolQueue("small")); st != (domain.QueueStats{}) {
		t.Fatalf("resource pool after pickup: %+v", st)
	}
	f.Clock.Advance(time.Hour)
	if st := f.Stats(domain.ResourcePoolQueue("small")); st != (domain.QueueStats{}) {
		t.Fatalf("the entry came back after its visibility: %+v", st)
	}
}

func TestPickupRequeuesMissesWithTheConfiguredDelay(t *testing.T) {
	f := newFixture(t, withOptions(func(o *Options) { o.RequeueDelay = 7 * time.Second }))
	big := f.reusable(domain.RunnerSpec{Name: "small", CPU: domain.Range{Min: 16}, RAM: domain.Range{Min: 64}, Family: []string{"c7a"}}, 1, nil)[0]
	spot := f.reusable(domain.RunnerSpec{Name: "small", CPU: domain.Range{Min: 2}, RAM: domain.Range{Min: 4}, Spot: "lowest-price", Family: []string{"c7a"}}, 1, nil)[0]
	fits := f.reusable(small, 1, nil)[0]
	q := domain.ResourcePoolQueue("small")
	before := f.rawBodies(q)

	e, _, err := f.p.pickupFor("small").next(f.Ctx, newSearch(small))
	if err != nil || e == nil || e.InstanceID != fits.ID {
		t.Fatalf("next = %+v, %v; want %s behind two misses", e, err, fits.ID)
	}
	if st := f.Stats(q); st.Delayed != 2 || st.Visible != 0 || st.InFlight != 0 {
		t.Fatalf("misses not requeued with a delay: %+v", st)
	}
	f.Clock.Advance(7*time.Second - time.Millisecond)
	if st := f.Stats(q); st.Visible != 0 {
		t.Fatalf("misses visible before the delay: %+v", st)
	}
	f.Clock.Advance(time.Millisecond)
	after := f.rawBodies(q)
	if len(after) != 2 || after[0] != before[0] || after[1] != before[1] {
		t.Fatalf("requeued bodies differ from the originals (%s, %s):\n%q\n%q", big.ID, spot.ID, before[:2], after)
	}
}

// rawBodies returns the bodies of q's visible messages, leaving them there.
func (f *fixture) rawBodies(q string) []string {
	f.T.Helper()
	var out []string
	for _, m := range f.Peek(q, 100) {
		out = append(out, string(m.Body))
	}
	return out
}

func TestPickupDropsExpiredEntries(t *testing.T) {
	f := newFixture(t)
	f.reusable(small, 1, func(in *domain.Instance) { in.Deadline = t0.Add(time.Second) })
	f.Clock.Advance(time.Second)
	e, exhausted, err := f.p.pickupFor("small").next(f.Ctx, newSearch(small))
	if err != nil || e != nil || exhausted != "global" {
		t.Fatalf("next = %+v, %q, %v; want global exhaustion", e, exhausted, err)
	}
	f.Clock.Advance(time.Hour)
	if st := f.Stats(domain.ResourcePoolQueue("small")); st != (domain.QueueStats{}) {
		t.Fatalf("an expired entry was requeued: %+v", st)
	}
}

func TestPickupDropsUnreadableEntries(t *testing.T) {
	f := newFixture(t)
	q := domain.ResourcePoolQueue("small")
	noID, _ := json.Marshal(domain.ResourcePoolEntry{CPU: 2})
	if err := f.Queue.Send(f.Ctx, q, []domain.SendRequest{{Body: []byte("{not json")}, {Body: noID}}); err != nil {
		t.Fatal(err)
	}
	fits := f.reusable(small, 1, nil)[0]
	e, _, err := f.p.pickupFor("small").next(f.Ctx, newSearch(small))
	if err != nil || e == nil || e.InstanceID != fits.ID {
		t.Fatalf("next = %+v, %v", e, err)
	}
	if st := f.Stats(q); st != (domain.QueueStats{}) {
		t.Fatalf("unreadable entries kept: %+v", st)
	}
}

func TestPickupIsGloballyExhaustedByAnEmptyQueue(t *testing.T) {
	f := newFixture(t)
	e, exhausted, err := f.p.pickupFor("small").next(f.Ctx, newSearch(small))
	if err != nil || e != nil || exhausted != "global" {
		t.Fatalf("next = %+v, %q, %v", e, exhausted, err)
	}
}

// undelayed sends resource-pool messages without their delay, so that a
// requeued miss comes straight back as it would once the delay has passed
// in a long search.
type undelayed struct{ domain.Queue }

func (q undelayed) Send(ctx context.Context, name string, msgs []domain.SendRequest) error {
	for i := range msgs {
		msgs[i].Delay = 0
	}
	return q.Queue.Send(ctx, name, msgs)
}

func TestPickupIsLocallyExhaustedAfterSeeingAnInstanceNTimes(t *testing.T) {
	for _, tt := range []struct {
		name  string
		limit int // Options.SeenLimit; 0 takes the default
		want  int
	}{{"default", 0, 5}, {"configured", 2, 2}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, withOptions(func(o *Options) { o.SeenLimit = tt.limit }))
			spot := domain.RunnerSpec{Name: "small", CPU: domain.Range{Min: 2}, Spot: "lowest-price", Family: []string{"c7a"}}
			misses := f.reusable(spot, 2, nil)
			pm := f.p.pickupFor("small")
			if pm.seenLimit != tt.want {
				t.Fatalf("seen limit %d, want %d", pm.seenLimit, tt.want)
			}
			pm.queue = undelayed{f.Queue}
			s := newSearch(small)
			e, exhausted, err := pm.next(f.Ctx, s)
			if err != nil || e != nil || exhausted != "local" {
				t.Fatalf("next = %+v, %q, %v; want local exhaustion", e, exhausted, err)
			}
			if s.seen[misses[0].ID] != tt.want || s.seen[misses[1].ID] != tt.want-1 {
				t.Fatalf("seen %v", s.seen)
			}
			// Nothing is lost: both entries are still there for other requests.
			if got := f.poolEntries("small"); len(got) != 2 {
				t.Fatalf("resource pool holds %v", got)
			}
		})
	}
}

// forgetful answers the first receive from one queue with nothing, as an
// SQS short poll may while a few messages wait on servers it did not
// sample; it counts the receives from that queue.
type forgetful struct {
	domain.Queue
	queue    string
	receives *atomic.Int32
}

func (q forgetful) Receive(ctx context.Context, name string, max int, vis, wait time.Duration) ([]domain.Message, error) {
	if name == q.queue && q.receives.Add(1) == 1 {
		return nil, nil
	}
	return q.Queue.Receive(ctx, name, max, vis, wait)
}

// listCounting counts the listings of instances.
type listCounting struct {
	Store
	lists *atomic.Int32
}

func (s listCounting) ListInstances(ctx context.Context, f domain.InstanceFilter) ([]domain.Instance, error) {
	s.lists.Add(1)
	return s.Store.ListInstances(ctx, f)
}

// One empty receive is not taken for an empty pool while the store knows
// an idle instance of the class: a second look finds its entry.
func TestPickupLooksAgainWhenTheStoreKnowsAnIdleInstance(t *testing.T) {
	var receives atomic.Int32
	f := newFixture(t, func(_ *fixture, d *Deps, o *Options) {
		d.Queue = forgetful{Queue: d.Queue, queue: domain.ResourcePoolQueue("small"), receives: &receives}
		o.Wait = time.Second
	})
	in := f.reusable(small, 1, nil)[0]
	f.queueJobs(small, 100, 1)

	f.serve()

	f.wantJob(100, domain.JobAssigned, domain.ViaReuse, in.ID)
	if n := f.cloud.Calls()["CreateFleet"]; n != 0 || counter(t, f.p.metrics.exhausted, "global") != 0 {
		t.Fatalf("%d fleets: an empty receive was taken for an empty pool", n)
	}
}

// A burst's searches of a pool found empty on a second look take it at its
// word: the store is read once, not once per search.
func TestABurstLooksAtTheStoreOnce(t *testing.T) {
	var lists atomic.Int32
	f := newFixture(t, func(_ *fixture, d *Deps, _ *Options) { d.Store = listCounting{Store: d.Store, lists: &lists} })
	f.queueJobs(small, 100, 5)
	f.serve()
	if n := lists.Load(); n != 1 || counter(t, f.p.metrics.exhausted, "global") != 5 {
		t.Fatalf("%d listings for 5 searches of an empty pool, want 1", n)
	}
}

// A class no pool that reuses its instances runs is never offered one: its
// jobs go to creation without a search.
func TestAClassNoReusingPoolRunsIsNotSearched(t *testing.T) {
	var receives atomic.Int32
	f := newFixture(t, func(_ *fixture, d *Deps, _ *Options) {
		d.Queue = forgetful{Queue: d.Queue, queue: domain.ResourcePoolQueue("small"), receives: &receives}
		d.Reused = func(runner string) bool { return runner != "small" }
	})
	f.queueJobs(small, 100, 1)
	f.serve()
	if n := receives.Load(); n != 0 || counter(t, f.p.metrics.exhausted, "unfed") != 1 {
		t.Fatalf("%d receives from the resource pool of a class nothing feeds", n)
	}
	if j := f.Job(100); j.Status != domain.JobAssigned || j.Via != domain.ViaCold {
		t.Fatalf("job %s via %q (%s)", j.Status, j.Via, j.Reason)
	}
}
