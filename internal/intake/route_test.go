package intake

import (
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func routing() Routing {
	small := domain.RunnerSpec{Name: "small-x64", Image: "ubuntu24-full-x64", CPU: domain.Range{Min: 2, Max: 2}, Family: []string{"t3"}}
	big := domain.RunnerSpec{Name: "big", Image: "ubuntu24-full-x64", CPU: domain.Range{Min: 16, Max: 16}}
	return Routing{
		Environment: "dev", Region: "eu-west-1",
		Pools: map[string]domain.Pool{
			"small-x64":  {Name: "small-x64", Runner: "small-x64"},
			"dependabot": {Name: "dependabot", Runner: "small-x64"},
			"broken":     {Name: "broken", Runner: "gone"},
		},
		Runners: map[string]domain.RunnerSpec{"small-x64": small, "big": big},
	}
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name   string
		labels []string
		want   string // route/pool/runner, "not ours", or "reject: <substring>"
	}{
		{"pool with run pin", []string{"runs-on=123/pool=small-x64"}, "pool/small-x64/small-x64"},
		{"pool without run pin", []string{"runs-on/pool=small-x64"}, "pool/small-x64/small-x64"},
		{"pool ignores machine keys", []string{"runs-on=1,pool=small-x64,cpu=64"}, "pool/small-x64/small-x64"},
		{"dependabot expands to its pool", []string{"self-hosted", "dependabot"}, "pool/dependabot/small-x64"},
		{"runner label", []string{"runs-on=9/runner=big"}, "launch//big"},
		{"ad-hoc spec", []string{"runs-on=9/cpu=4/ram=16"}, "launch//adhoc-"},
		{"bare runs-on is the default runner", []string{"runs-on"}, "launch//default"},
		{"not ours without runs-on", []string{"self-hosted", "linux"}, "not ours"},
		{"github-hosted", []string{"ubuntu-latest"}, "not ours"},
		{"another environment's job", []string{"runs-on/pool=small-x64", "env=prod"}, "not ours"},
		{"our environment named", []string{"runs-on/pool=small-x64/env=dev"}, "pool/small-x64/small-x64"},
		{"another region's job", []string{"runs-on/pool=small-x64/region=ap-south-1"}, "not ours"},
		{"our region named", []string{"runs-on/pool=small-x64/region=eu-west-1"}, "pool/small-x64/small-x64"},
		{"unknown pool is rejected", []string{"runs-on=5/pool=large"}, `reject: pool "large" is not configured for environment "dev"`},
		{"unknown runner is rejected", []string{"runs-on=5/runner=huge"}, `reject: runner "huge" is not configured`},
		{"pool with a missing runner is rejected", []string{"runs-on/pool=broken"}, `reject: pool "broken" names runner "gone"`},
		{"malformed label is rejected", []string{"runs-on=1/cpu=four"}, "reject: cpu"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.labels, routing())
			got := "not ours"
			switch {
			case !d.Ours:
			case d.Reject != "":
				got = "reject: " + d.Reject
			default:
				got = string(d.Route) + "/" + d.Pool + "/" + d.Runner
			}
			if !strings.HasPrefix(got, c.want) && !(strings.HasPrefix(c.want, "reject: ") && strings.Contains(got, strings.TrimPrefix(c.want, "reject: "))) {
				t.Fatalf("Decide(%q) = %s, want %s", c.labels, got, c.want)
			}
		})
	}
}

// A label's value is cut short in the reason, which is logged and stored.
func TestAHugeUnknownNameIsCutShortInTheReason(t *testing.T) {
	for _, key := range []string{"pool", "runner"} {
		d := Decide([]string{"runs-on/" + key + "=" + strings.Repeat("x", 100_000)}, routing())
		if d.Reject == "" || len(d.Reject) > 400 {
			t.Errorf("%s: a reason of %d bytes: %.80s…", key, len(d.Reject), d.Reject)
		}
	}
}

func TestDecideAdhocSpecAppliesOverrides(t *testing.T) {
	d := Decide([]string{"runs-on=9/runner=big/cpu=32/spot=pco"}, routing())
	if d.Spec.CPU.Min != 32 || d.Spec.Spot != "price-capacity-optimized" || d.Spec.Image != "ubuntu24-full-x64" || d.Runner == "big" {
		t.Fatalf("spec %+v class %s", d.Spec, d.Runner)
	}
	again := Decide([]string{"runs-on=10,runner=big,spot=pco,cpu=32"}, routing())
	if again.Runner != d.Runner {
		t.Fatalf("the same machine in other words got class %s, then %s", d.Runner, again.Runner)
	}
}

// A stack without a region (the simulated and local clouds) serves a job
// whatever region it names.
func TestAStackWithoutARegionServesEveryRegion(t *testing.T) {
	r := routing()
	r.Region = ""
	if d := Decide([]string{"runs-on/pool=small-x64/region=ap-south-1"}, r); !d.Ours || d.Pool != "small-x64" {
		t.Fatalf("decision %+v, want the pool's", d)
	}
}

// An image a job label names is resolved as a runner's is: a key of the
// configuration's images: becomes its entry's reference, and a label that
// names a runner's own image by its key keeps that runner's machine.
func TestALabelsImageKeyIsResolved(t *testing.T) {
	r := routing()
	big := r.Runners["big"]
	big.Image = "ami-0123456789abcdef0" // its images: key, as the configuration resolved it
	r.Runners["big"] = big
	r.ImageRef = func(name string) string {
		if name == "golden" {
			return "ami-0123456789abcdef0"
		}
		return name
	}
	if d := Decide([]string{"runs-on=1/cpu=4/image=golden"}, r); d.Spec.Image != "ami-0123456789abcdef0" {
		t.Fatalf("image %q, want the images entry's AMI", d.Spec.Image)
	}
	if d := Decide([]string{"runs-on=1/runner=big/image=golden"}, r); d.Runner != "big" {
		t.Fatalf("runner %q, want big itself: its own image named by key is no change", d.Runner)
	}
	if d := Decide([]string{"runs-on=1/cpu=4/image=ubuntu22-full-x64"}, r); d.Spec.Image != "ubuntu22-full-x64" {
		t.Fatalf("image %q, want a name that is no key kept as written", d.Spec.Image)
	}
}
