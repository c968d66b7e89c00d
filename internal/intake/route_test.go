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
		Environment: "production", Region: "eu-west-1",
		Pools: map[string]domain.Pool{
			"small-x64":  {Name: "small-x64", Runner: "small-x64"},
			"dependabot": {Name: "dependabot", Runner: "small-x64"},
			"broken":     {Name: "broken", Runner: "gone"},
		},
		Runners: map[string]domain.RunnerSpec{"small-x64": small, "big": big},
	}
}

// decision is a Decision in the form the tables want: route/pool/runner,
// "not ours", or "reject: <reason>".
func decision(d Decision) string {
	switch {
	case !d.Ours:
		return "not ours"
	case d.Reject != "":
		return "reject: " + d.Reject
	}
	return string(d.Route) + "/" + d.Pool + "/" + d.Runner
}

// matches reports whether a decision is the one a table wants: one that
// starts so, or a rejection whose reason holds the wanted one.
func matches(got, want string) bool {
	reason, rejection := strings.CutPrefix(want, "reject: ")
	return strings.HasPrefix(got, want) || rejection && strings.HasPrefix(got, "reject: ") && strings.Contains(got, reason)
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
		{"our environment named", []string{"runs-on/pool=small-x64/env=production"}, "pool/small-x64/small-x64"},
		{"another region's job", []string{"runs-on/pool=small-x64/region=ap-south-1"}, "not ours"},
		{"our region named", []string{"runs-on/pool=small-x64/region=eu-west-1"}, "pool/small-x64/small-x64"},
		{"unknown pool is rejected", []string{"runs-on=5/pool=large"}, `reject: pool "large" is not configured for environment "production"`},
		{"unknown runner is rejected", []string{"runs-on=5/runner=huge"}, `reject: runner "huge" is not configured`},
		{"pool with a missing runner is rejected", []string{"runs-on/pool=broken"}, `reject: pool "broken" names runner "gone"`},
		{"malformed label is rejected", []string{"runs-on=1/cpu=four"}, "reject: cpu"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := decision(Decide(c.labels, routing()))
			if !matches(got, c.want) {
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

// Two stacks, dev and production, read one configuration file. A job
// belongs to the environment its env= names, and to production without
// one: exactly one of the stacks takes it, and the other neither serves
// nor rejects it (a rejection could cancel the run the first one serves).
// A job naming a pool of another environment is left to that
// environment's stack, never rejected.
func TestStacksSharingAConfigurationTakeEachJobOnce(t *testing.T) {
	small := domain.RunnerSpec{Name: "small-x64", Image: "ubuntu24-full-x64", CPU: domain.Range{Min: 2, Max: 2}}
	big := domain.RunnerSpec{Name: "big", Image: "ubuntu24-full-x64", CPU: domain.Range{Min: 16, Max: 16}}
	stack := func(env string) Routing {
		return Routing{
			Environment: env,
			Pools: map[string]domain.Pool{
				"small-x64":  {Name: "small-x64", Environment: "dev", Runner: "small-x64"},
				"deploy":     {Name: "deploy", Environment: "production", Runner: "big"},
				"shared":     {Name: "shared", Runner: "small-x64"},
				"dependabot": {Name: "dependabot", Runner: "small-x64"},
			},
			Runners: map[string]domain.RunnerSpec{"small-x64": small, "big": big},
		}
	}
	cases := []struct {
		name        string
		labels      []string
		dev, prod   string // the decision of each stack, as in TestDecide
		defaultProd string // the decision of a stack left at Environment ""
	}{
		{"a dev pool without env= is rejected by production, saying which env= it needs", []string{"runs-on=1/pool=small-x64"},
			"not ours", `reject: pool "small-x64" belongs to environment "dev", and the job to "production": add env=dev`,
			`reject: pool "small-x64" belongs to environment "dev", and the job to "production": add env=dev`},
		{"a dev pool with env=dev", []string{"runs-on=1/pool=small-x64/env=dev"},
			"pool/small-x64/small-x64", "not ours", "not ours"},
		{"a production pool without env=", []string{"runs-on=1/pool=deploy"},
			"not ours", "pool/deploy/big", "pool/deploy/big"},
		{"a production pool with env=dev is rejected by dev", []string{"runs-on=1/pool=deploy", "env=dev"},
			`reject: pool "deploy" belongs to environment "production", and the job to "dev": add env=production`, "not ours", "not ours"},
		{"a pool of every environment without env=", []string{"runs-on=1/pool=shared"},
			"not ours", "pool/shared/small-x64", "pool/shared/small-x64"},
		{"a pool of every environment with env=dev", []string{"runs-on=1/pool=shared/env=dev"},
			"pool/shared/small-x64", "not ours", "not ours"},
		{"a runner without env=", []string{"runs-on=1/runner=big"},
			"not ours", "launch//big", "launch//big"},
		{"a runner with env=dev", []string{"runs-on=1/runner=big/env=dev"},
			"launch//big", "not ours", "not ours"},
		{"an ad-hoc machine without env=", []string{"runs-on=1/cpu=4"},
			"not ours", "launch//adhoc-", "launch//adhoc-"},
		{"a dependabot job", []string{"self-hosted", "dependabot"},
			"not ours", "pool/dependabot/small-x64", "pool/dependabot/small-x64"},
		{"a pool no environment has, without env=", []string{"runs-on=1/pool=nowhere"},
			"not ours", `reject: pool "nowhere" is not configured for environment "production" (pools: dependabot, deploy, shared)`,
			`reject: pool "nowhere" is not configured for environment "production"`},
		{"a pool no environment has, with env=dev", []string{"runs-on=1/pool=nowhere/env=dev"},
			`reject: pool "nowhere" is not configured for environment "dev" (pools: dependabot, shared, small-x64)`, "not ours", "not ours"},
		{"a third environment's job", []string{"runs-on=1/runner=big/env=staging"},
			"not ours", "not ours", "not ours"},
		// The faulty label stops the parse before env= is read.
		{"a malformed label before env=dev", []string{"runs-on=1/cpu=four/env=dev"},
			"reject: cpu", "not ours", "not ours"},
		{"a malformed label and a separate env=dev", []string{"runs-on=1/cpu=four", "env=dev"},
			"reject: cpu", "not ours", "not ours"},
		{"a malformed label without env=", []string{"runs-on=1/cpu=four"},
			"not ours", "reject: cpu", "reject: cpu"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range []struct{ env, want string }{{"dev", c.dev}, {"production", c.prod}, {"", c.defaultProd}} {
				got := decision(Decide(c.labels, stack(s.env)))
				if !matches(got, s.want) {
					t.Errorf("the %q stack: Decide(%q) = %s, want %s", s.env, c.labels, got, s.want)
				}
			}
		})
	}
}

// A region named after a faulty label is still read: another region's
// stack leaves the job alone rather than rejecting it.
func TestAMalformedJobOfAnotherRegionIsNotOurs(t *testing.T) {
	if got := decision(Decide([]string{"runs-on=1/cpu=four/region=ap-south-1"}, routing())); got != "not ours" {
		t.Fatalf("decision %s, want not ours", got)
	}
	if got := decision(Decide([]string{"runs-on=1/cpu=four/region=eu-west-1"}, routing())); !strings.HasPrefix(got, "reject: ") {
		t.Fatalf("decision %s, want our region's job rejected", got)
	}
}

// GitHub compares labels without case, and so does Decide an env= or a
// region= with the stack's.
func TestEnvironmentAndRegionAreComparedWithoutCase(t *testing.T) {
	dev := routing()
	dev.Environment = "dev"
	for _, c := range []struct {
		stack  Routing
		labels []string
	}{
		{routing(), []string{"runs-on/pool=small-x64/env=Production"}},
		{routing(), []string{"RUNS-ON/POOL=small-x64/ENV=PRODUCTION"}},
		{routing(), []string{"runs-on/pool=small-x64", "env=PRODUCTION"}},
		{routing(), []string{"runs-on/pool=small-x64/region=EU-West-1"}},
		{dev, []string{"runs-on/pool=small-x64/env=Dev"}},
		{dev, []string{"runs-on/pool=small-x64", "ENV=DEV"}},
	} {
		if got := decision(Decide(c.labels, c.stack)); got != "pool/small-x64/small-x64" {
			t.Errorf("the %s stack: Decide(%q) = %s, want the pool's", c.stack.Environment, c.labels, got)
		}
	}
	if got := decision(Decide([]string{"runs-on/pool=small-x64/region=AP-South-1"}, routing())); got != "not ours" {
		t.Errorf("another region's job in capitals: %s, want not ours", got)
	}
}

// A job not ours only because its env= names an environment no pool names
// says which: most likely a typo, which no stack serves. The default
// environment, one a pool names in any case, and jobs not ours for other
// reasons are not.
func TestDecideNamesAnEnvironmentNoPoolNames(t *testing.T) {
	r := routing()
	r.Pools["dev-only"] = domain.Pool{Name: "dev-only", Environment: "dev", Runner: "small-x64"}
	for _, c := range []struct {
		labels []string
		want   string
	}{
		{[]string{"runs-on/pool=small-x64/env=dve"}, "dve"},
		{[]string{"runs-on/runner=big", "env=Staging"}, "Staging"},
		{[]string{"runs-on=1/cpu=four/env=dve"}, "dve"}, // read past the faulty label
		{[]string{"runs-on/pool=small-x64/env=dev"}, ""},
		{[]string{"runs-on/pool=small-x64/env=DEV"}, ""},
		{[]string{"runs-on/pool=small-x64/env=production"}, ""},
		{[]string{"runs-on/pool=small-x64/region=ap-south-1"}, ""},
		{[]string{"self-hosted", "env=dve"}, ""},
		{[]string{"ubuntu-latest"}, ""},
	} {
		d := Decide(c.labels, r)
		if d.UnknownEnvironment != c.want || (c.want != "" && d.Ours) {
			t.Errorf("Decide(%q): ours %v, unknown environment %q; want %q", c.labels, d.Ours, d.UnknownEnvironment, c.want)
		}
	}
}
