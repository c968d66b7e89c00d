package labels

import (
	"reflect"
	"regexp"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

var small = domain.RunnerSpec{
	Name: "2cpu-linux-x64", Image: "ubuntu24-full-x64",
	CPU: domain.Range{Min: 2, Max: 2}, RAM: domain.Range{Min: 4, Max: 8},
	Family: []string{"m7a", "c7a"}, Volume: domain.Volume{Type: "gp3", SizeGB: 30}, Spot: "price-capacity-optimized",
}

func mustParse(t *testing.T, labels ...string) Request {
	t.Helper()
	r, err := Parse(labels, testPools)
	if err != nil {
		t.Fatalf("Parse(%q): %v", labels, err)
	}
	return r
}

func TestColdSpec(t *testing.T) {
	cases := []struct {
		name   string
		labels []string
		want   func(s *domain.RunnerSpec) // changes to small; nil when none
	}{
		{"no overrides", []string{"runs-on", "runner=2cpu-linux-x64"}, nil},
		{"cpu and ram", []string{"runs-on/cpu=4+8/ram=16"}, func(s *domain.RunnerSpec) {
			s.CPU, s.RAM = domain.Range{Min: 4, Max: 8}, domain.Range{Min: 16, Max: 16}
		}},
		{"family replaces the list", []string{"runs-on/family=c8g"}, func(s *domain.RunnerSpec) { s.Family = []string{"c8g"} }},
		{"image", []string{"runs-on/image=ubuntu22-full-arm64"}, func(s *domain.RunnerSpec) { s.Image = "ubuntu22-full-arm64" }},
		{"spot=false asks for on-demand", []string{"runs-on/spot=false"}, func(s *domain.RunnerSpec) { s.Spot = "" }},
		{"spot strategy", []string{"runs-on/spot=capacity-optimized"}, func(s *domain.RunnerSpec) { s.Spot = "capacity-optimized" }},
		{"volume replaces the whole volume", []string{"runs-on/volume=io2:100gb:5000iops"}, func(s *domain.RunnerSpec) {
			s.Volume = domain.Volume{Type: "io2", SizeGB: 100, IOPS: 5000}
		}},
		{"a pool's request keeps the pool's runner", []string{"runs-on/pool=small-x64/cpu=64/image=other"}, nil},
		{"overrides equal to the base change nothing", []string{"runs-on/cpu=2/family=c7a+m7a"}, func(s *domain.RunnerSpec) {
			s.Family = []string{"c7a", "m7a"}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mustParse(t, c.labels...)
			want := small
			want.Family = append([]string(nil), small.Family...)
			if c.want != nil {
				c.want(&want)
			}
			got := r.ColdSpec(small)
			want.Name = r.Class(small)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ColdSpec\n got  %+v\n want %+v", got, want)
			}
		})
	}
}

func TestColdSpecLeavesTheBaseAlone(t *testing.T) {
	base := small
	base.Family = []string{"m7a", "c7a"}
	spec := mustParse(t, "runs-on").ColdSpec(base)
	spec.Family[0] = "changed"
	if base.Family[0] != "m7a" {
		t.Errorf("ColdSpec shares the base's family list")
	}
}

var adhocClass = regexp.MustCompile(`^adhoc-[0-9a-f]{12}$`)

func TestClass(t *testing.T) {
	classOf := func(base domain.RunnerSpec, labels ...string) string { return mustParse(t, labels...).Class(base) }
	cases := []struct {
		name string
		got  string
		want string // "adhoc" for any ad-hoc class
	}{
		{"runner= without overrides is the runner", classOf(small, "runs-on", "runner=2cpu-linux-x64"), small.Name},
		{"default runner without overrides", classOf(small, "runs-on=5"), small.Name},
		{"pool request is the pool's runner", classOf(small, "runs-on/pool=small-x64/cpu=16"), small.Name},
		{"overrides equal to the base keep the runner", classOf(small, "runs-on/cpu=2/spot=pco/family=c7a+m7a"), small.Name},
		{"overrides make an ad-hoc class", classOf(small, "runs-on/cpu=4"), "adhoc"},
		{"a base without a name is ad hoc", classOf(domain.RunnerSpec{Image: "u"}, "runs-on"), "adhoc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want == "adhoc" && !adhocClass.MatchString(c.got) || c.want != "adhoc" && c.got != c.want {
				t.Errorf("class %q, want %q", c.got, c.want)
			}
		})
	}
}

func TestClassIsTheMachineNotTheWording(t *testing.T) {
	same := [][2][]string{
		{{"runs-on/cpu=2+8"}, {"runs-on/cpu=8+2"}},
		{{"runs-on/cpu=2+8"}, {"runs-on/cpu=8+4+2"}},
		{{"runs-on/family=c8g+m8g"}, {"runs-on/family=m8g+c8g"}},
		{{"runs-on=1/spot=true/ram=32"}, {"runs-on=2", "ram=32", "spot=pco"}},
		{{"runs-on/cpu=4/env=dev/ssh=true"}, {"runs-on/cpu=4/env=prod"}},
		{{"runs-on/volume=gp3:30gb:125mbps:3000iops/cpu=4"}, {"runs-on/volume=GP3:30GB:3000IOPS:125MBPS,cpu=4"}},
	}
	for _, pair := range same {
		a, b := mustParse(t, pair[0]...).Class(small), mustParse(t, pair[1]...).Class(small)
		if a != b {
			t.Errorf("%q → %s but %q → %s; want one class", pair[0], a, pair[1], b)
		}
	}
	different := [][2][]string{
		{{"runs-on/cpu=2+8"}, {"runs-on/cpu=2+4"}},
		{{"runs-on/cpu=4"}, {"runs-on/ram=4"}},
		{{"runs-on/spot=false"}, {"runs-on/spot=lowest-price"}},
		{{"runs-on/image=a"}, {"runs-on/image=b"}},
		{{"runs-on/volume=gp3:30gb"}, {"runs-on/volume=gp3:31gb"}},
	}
	for _, pair := range different {
		a, b := mustParse(t, pair[0]...).Class(small), mustParse(t, pair[1]...).Class(small)
		if a == b {
			t.Errorf("%q and %q share class %s; want two", pair[0], pair[1], a)
		}
	}
}

func TestClassFollowsTheBase(t *testing.T) {
	r := mustParse(t, "runs-on/cpu=4")
	changed := small
	changed.Image = "ubuntu26-full-x64"
	if r.Class(small) == r.Class(changed) {
		t.Errorf("a new base image kept class %s: idle machines of the old image would be reused", r.Class(small))
	}
	renamed := small
	renamed.Name = "other-name"
	if r.Class(small) != r.Class(renamed) {
		t.Errorf("two runners describing one machine give classes %s and %s", r.Class(small), r.Class(renamed))
	}
}

// IsZero reports whether the overrides leave a runner spec as it is.
func (o SpecOverrides) IsZero() bool {
	return o.CPU == domain.Range{} && o.RAM == domain.Range{} && len(o.Family) == 0 &&
		o.Image == "" && o.Spot == nil && o.Volume == domain.Volume{}
}

// Class is the resource-pool class of the job's machine over base: jobs of
// one class can reuse each other's idle instances. It is base.Name when the
// labels leave the machine as base describes it, and otherwise "adhoc-"
// followed by a fingerprint of the machine, so that two jobs asking for the
// same machine in different words (cpu=2+8, cpu=8+2) share a class, and a
// change to the base runner's configuration starts a new one.
func (r Request) Class(base domain.RunnerSpec) string {
	return r.class(base, r.apply(base))
}
