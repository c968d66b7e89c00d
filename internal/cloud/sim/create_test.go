package sim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/cloud/cloudtest"
	"github.com/bullpen-ci/bullpen/internal/cloud/sim"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// The simulated cloud picks the type the EC2 provider would list first:
// within the runner's cpu and ram ranges, fewest vCPUs, then least memory,
// then name, across its families.
func TestInstanceTypeFitsCPUAndRAM(t *testing.T) {
	tests := []struct {
		family   []string
		cpu, ram domain.Range
		want     string
	}{
		// Without a family, any of the catalogue's, as on EC2.
		{nil, domain.Range{}, domain.Range{}, "c7a.medium"},
		{nil, domain.Range{Min: 2}, domain.Range{}, "t3.nano"},
		{nil, domain.Range{}, domain.Range{Min: 1, Max: 1}, "t3.micro"},
		{nil, domain.Range{Min: 4, Max: 4}, domain.Range{Min: 16, Max: 16}, "m6i.xlarge"},
		// The example's small-x64: ram 1 GiB on t3 is a micro, not a large.
		{[]string{"t3"}, domain.Range{}, domain.Range{Min: 1, Max: 1}, "t3.micro"},
		{[]string{"t3"}, domain.Range{Min: 1}, domain.Range{}, "t3.nano"},
		{[]string{"t3"}, domain.Range{Min: 4}, domain.Range{Min: 16, Max: 16}, "t3.xlarge"},
		// The example's medium-x64: the smallest of three families.
		{[]string{"m7a", "m7i", "c7a"}, domain.Range{Min: 2, Max: 4}, domain.Range{Min: 4, Max: 16}, "c7a.large"},
		// Memory rules out the compute family's smaller sizes.
		{[]string{"c7a", "m7a"}, domain.Range{Min: 2}, domain.Range{Min: 8}, "m7a.large"},
		{[]string{"c7a"}, domain.Range{Min: 2}, domain.Range{Min: 32}, "c7a.4xlarge"},
		{[]string{"m7i*"}, domain.Range{Min: 4}, domain.Range{}, "m7i-flex.xlarge"},
		{[]string{"m6i"}, domain.Range{}, domain.Range{}, "m6i.large"},
		{[]string{"c7a"}, domain.Range{Min: 16, Max: 32}, domain.Range{}, "c7a.4xlarge"},
		{[]string{"c7a"}, domain.Range{Min: 48}, domain.Range{}, "c7a.12xlarge"},
		{[]string{"c7a.metal-48xl"}, domain.Range{Min: 2}, domain.Range{}, "c7a.metal-48xl"},
		{[]string{"c7a.2xlarge", "c7a.xlarge"}, domain.Range{}, domain.Range{}, "c7a.xlarge"},
		{[]string{"*"}, domain.Range{Min: 5}, domain.Range{}, "c6i.2xlarge"},
		{[]string{"r7i"}, domain.Range{Min: 2}, domain.Range{Min: 16}, "r7i.large"},
		// A pattern of types is matched against the catalogue's types, not
		// launched as a type.
		{[]string{"c7a.*"}, domain.Range{Min: 2}, domain.Range{}, "c7a.large"},
		{[]string{"t3.*"}, domain.Range{}, domain.Range{Min: 2}, "t3.small"},
		// A type of unknown size comes after every known fit.
		{[]string{"c7a.metal-48xl", "m7a"}, domain.Range{Min: 2}, domain.Range{}, "m7a.large"},
	}
	for _, tt := range tests {
		got, err := sim.InstanceType(domain.RunnerSpec{Family: tt.family, CPU: tt.cpu, RAM: tt.ram})
		if err != nil || got != tt.want {
			t.Errorf("InstanceType(%v, cpu %+v, ram %+v) = %q, %v; want %q", tt.family, tt.cpu, tt.ram, got, err, tt.want)
		}
	}
}

// A runner no type fits is refused before any call, as the EC2 provider
// refuses it.
func TestCreateRefusesARunnerNoTypeFits(t *testing.T) {
	c, _ := newSim(t, sim.Options{})
	runner := domain.RunnerSpec{Family: []string{"m7a"}, RAM: domain.Range{Min: 1, Max: 1}}
	_, err := c.Create(t.Context(), domain.LaunchSpec{Runner: runner, ImageID: "ami-1", Count: 1})
	var ce *domain.CloudError
	if !errors.Is(err, domain.ErrInvalidRequest) || !errors.As(err, &ce) || ce.Code != "Unsupported" ||
		!strings.Contains(err.Error(), "no instance type of families m7a with any vCPUs and 1 GiB") {
		t.Fatalf("err = %v", err)
	}
	if n := c.Calls()[sim.OpCreateFleet]; n != 0 {
		t.Errorf("%d CreateFleet calls for a runner no type fits", n)
	}
}

func TestCreateDescribesMachines(t *testing.T) {
	c, _ := newSim(t, sim.Options{})
	tags := map[string]string{domain.TagPool: "p"}
	runner := domain.RunnerSpec{Family: []string{"c7a"}, CPU: domain.Range{Min: 4}, Spot: "price-capacity-optimized"}
	ms, err := c.Create(t.Context(), domain.LaunchSpec{Runner: runner, ImageID: "ami-1", Count: 2, Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	tags[domain.TagPool] = "changed after the call"
	for _, m := range ms {
		if m.InstanceType != "c7a.xlarge" || m.UsageClass != "spot" || m.Tags[domain.TagPool] != "p" ||
			!m.LaunchedAt.Equal(epoch) || m.State != domain.CloudRunning || !strings.HasPrefix(m.ID, "i-") {
			t.Errorf("machine %+v", m)
		}
	}
	ms[0].Tags["x"] = "y"
	if m, _ := c.Get(ms[0].ID); m.Tags["x"] != "" {
		t.Fatal("a returned machine shares its tags with the sim")
	}
}

func TestInstanceIDsFollowTheSeed(t *testing.T) {
	a, _ := newSim(t, sim.Options{Seed: 1})
	b, _ := newSim(t, sim.Options{Seed: 1})
	other, _ := newSim(t, sim.Options{Seed: 2})
	ida, idb, ido := create(t, a, 3, nil), create(t, b, 3, nil), create(t, other, 3, nil)
	for i := range ida {
		if ida[i] != idb[i] || ida[i] == ido[i] || len(ida[i]) != len("i-")+17 {
			t.Fatalf("ids %v, %v, %v", ida, idb, ido)
		}
	}
}

func TestClientToken(t *testing.T) {
	c, _ := newSim(t, sim.Options{Capacity: 3})
	ctx := t.Context()
	spec := domain.LaunchSpec{ImageID: "ami-1", Count: 2, ClientToken: "launch-1", Tags: map[string]string{"a": "b"}}
	first, err := c.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Create(ctx, spec)
	if err != nil || len(again) != 2 || again[0].ID != first[0].ID || again[1].ID != first[1].ID {
		t.Fatalf("repeat returned %v, %v; want %v", again, err, first)
	}

	changed := spec
	changed.Count = 1
	_, err = c.Create(ctx, changed)
	cloudtest.WantCode(t, err, domain.ErrInvalidRequest, sim.CodeIdempotentMismatch)

	// A partial fulfilment replays with its error; one that launched
	// nothing is not remembered.
	partial := domain.LaunchSpec{ImageID: "ami-1", Count: 2, ClientToken: "launch-2"}
	got1, err1 := c.Create(ctx, partial)
	got2, err2 := c.Create(ctx, partial)
	if len(got1) != 1 || len(got2) != 1 || got1[0].ID != got2[0].ID ||
		!errors.Is(err1, domain.ErrInsufficientCapacity) || !errors.Is(err2, domain.ErrInsufficientCapacity) {
		t.Fatalf("partial replay: %v %v / %v %v", got1, err1, got2, err2)
	}
	none := domain.LaunchSpec{ImageID: "ami-1", Count: 1, ClientToken: "launch-3"}
	if _, err := c.Create(ctx, none); !errors.Is(err, domain.ErrInsufficientCapacity) {
		t.Fatalf("full cloud: %v", err)
	}
	if err := c.Terminate(ctx, []string{first[0].ID}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Create(ctx, none); err != nil || len(got) != 1 {
		t.Fatalf("retry after capacity freed: %v, %v", got, err)
	}
	if n := len(c.Instances()); n != 4 {
		t.Fatalf("%d machines, want 4", n)
	}
}

func TestResolveAndPublishImagesByName(t *testing.T) {
	c, _ := newSim(t, sim.Options{})
	ctx := t.Context()
	resolve := func(name string) string {
		t.Helper()
		id, err := c.ResolveImage(ctx, name, domain.RunnerSpec{})
		if err != nil {
			t.Fatalf("ResolveImage(%q): %v", name, err)
		}
		return id
	}
	ubuntu, other := resolve("ubuntu-24.04"), resolve("ubuntu-22.04")
	if !strings.HasPrefix(ubuntu, "ami-") || ubuntu == other || resolve("ubuntu-24.04") != ubuntu {
		t.Fatalf("ids %q, %q", ubuntu, other)
	}
	released := c.PublishImage("ubuntu-24.04")
	if released == ubuntu || resolve("ubuntu-24.04") != released || resolve("ubuntu-22.04") != other {
		t.Fatalf("after publish: %q", released)
	}
	_, err := c.ResolveImage(ctx, "", domain.RunnerSpec{})
	cloudtest.WantCode(t, err, domain.ErrUnknownImage, sim.CodeAMINotFound)
	_, err = c.Create(ctx, domain.LaunchSpec{Count: 1})
	cloudtest.WantCode(t, err, domain.ErrUnknownImage, sim.CodeAMIMalformed)
}

func TestResolveConfiguredImages(t *testing.T) {
	images := map[string]string{"runner": "ami-0aaaaaaaaaaaaaaaa"}
	c, _ := newSim(t, sim.Options{Images: images})
	ctx := t.Context()
	images["runner"] = "ami-changed-by-caller"
	if id, err := c.ResolveImage(ctx, "runner", domain.RunnerSpec{}); err != nil || id != "ami-0aaaaaaaaaaaaaaaa" {
		t.Fatalf("ResolveImage = %q, %v", id, err)
	}
	_, err := c.ResolveImage(ctx, "missing", domain.RunnerSpec{})
	cloudtest.WantCode(t, err, domain.ErrUnknownImage, sim.CodeAMINotFound)
	_, err = c.Create(ctx, domain.LaunchSpec{ImageID: "ami-elsewhere", Count: 1})
	cloudtest.WantCode(t, err, domain.ErrUnknownImage, sim.CodeAMINotFound)

	released := c.PublishImage("runner")
	if id, _ := c.ResolveImage(ctx, "runner", domain.RunnerSpec{}); id != released {
		t.Fatalf("after publish: %q, want %q", id, released)
	}
	for _, image := range []string{"ami-0aaaaaaaaaaaaaaaa", released} {
		if _, err := c.Create(ctx, domain.LaunchSpec{ImageID: image, Count: 1}); err != nil {
			t.Fatalf("Create with %s: %v", image, err)
		}
	}
}

// Like a real cloud, a sim never hands out an id again: a control plane
// restarted on the same store starts a new sim, whose machines must not
// share ids with the rows of the old one.
func TestUnseededSimsNeverReissueIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 3 {
		c, _ := newSim(t, sim.Options{})
		for _, id := range create(t, c, 3, nil) {
			if seen[id] {
				t.Fatalf("id %s handed out by two sims", id)
			}
			seen[id] = true
		}
	}
}
