package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestRunnerForms(t *testing.T) {
	cases := []struct {
		name string
		keys string // added to runner "r", indented by 4
		want domain.RunnerSpec
	}{
		{"image only", "", domain.RunnerSpec{}},
		{"cpu scalar is an exact size", "cpu: 2", domain.RunnerSpec{CPU: domain.Range{Min: 2, Max: 2}}},
		{"cpu list spans min to max", "cpu: [8, 2, 4]", domain.RunnerSpec{CPU: domain.Range{Min: 2, Max: 8}}},
		{"cpu list of one", "cpu: [4]", domain.RunnerSpec{CPU: domain.Range{Min: 4, Max: 4}}},
		{"ram scalar", "ram: 16", domain.RunnerSpec{RAM: domain.Range{Min: 16, Max: 16}}},
		{"ram block list", "ram:\n      - 4\n      - 32", domain.RunnerSpec{RAM: domain.Range{Min: 4, Max: 32}}},
		{"family scalar", "family: m7a", domain.RunnerSpec{Family: []string{"m7a"}}},
		{"family list", "family: [c7a, m7*, t3.micro, m7i-flex]", domain.RunnerSpec{Family: []string{"c7a", "m7*", "t3.micro", "m7i-flex"}}},
		{"volume full", "volume: gp3:30gb:125mbps:3000iops",
			domain.RunnerSpec{Volume: domain.Volume{Type: "gp3", SizeGB: 30, ThroughputMBps: 125, IOPS: 3000}}},
		{"volume type and size", "volume: io2:100gb", domain.RunnerSpec{Volume: domain.Volume{Type: "io2", SizeGB: 100}}},
		{"volume with throughput only", "volume: gp3:40gb:250mbps",
			domain.RunnerSpec{Volume: domain.Volume{Type: "gp3", SizeGB: 40, ThroughputMBps: 250}}},
		{"volume with iops only", "volume: gp3:40gb:4000iops",
			domain.RunnerSpec{Volume: domain.Volume{Type: "gp3", SizeGB: 40, IOPS: 4000}}},
		{"volume upper case", "volume: GP3:30GB:125MBPS:3000IOPS",
			domain.RunnerSpec{Volume: domain.Volume{Type: "gp3", SizeGB: 30, ThroughputMBps: 125, IOPS: 3000}}},
		{"spot false is on-demand", "spot: false", domain.RunnerSpec{}},
		{"spot true is price-capacity-optimized", "spot: true", domain.RunnerSpec{Spot: "price-capacity-optimized"}},
		{"spot pco is normalised", "spot: pco", domain.RunnerSpec{Spot: "price-capacity-optimized"}},
		{"spot strategy", "spot: price-capacity-optimized", domain.RunnerSpec{Spot: "price-capacity-optimized"}},
		{"spot lowest-price", "spot: lowest-price", domain.RunnerSpec{Spot: "lowest-price"}},
		{"retry when interrupted is the default", "retry: when-interrupted", domain.RunnerSpec{}},
		{"retry false", "retry: false", domain.RunnerSpec{Retry: domain.RetryNever}},
		{"retry false, quoted", `retry: "false"`, domain.RunnerSpec{Retry: domain.RetryNever}},
		{"retry when interrupted, any case", "retry: When-Interrupted", domain.RunnerSpec{}},
		{"spot capacity-optimized", "spot: capacity-optimized", domain.RunnerSpec{Spot: "capacity-optimized"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := mustParse(t, runnerWith(c.keys))
			got, ok := cfg.Runner("r")
			if !ok {
				t.Fatal("runner r missing")
			}
			want := c.want
			want.Name, want.Image = "r", "ubuntu"
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestRunnerProblems(t *testing.T) {
	const spotExpected = "(expected true, false, price-capacity-optimized, pco, lowest-price or capacity-optimized)"
	cases := []problemCase{
		{"cpu zero", "cpu: 0", []string{"4:10: runners.r.cpu: cpu must be > 0, got 0"}},
		{"cpu negative in list", "cpu: [2, -4]", []string{"4:14: runners.r.cpu[1]: cpu must be > 0, got -4"}},
		{"cpu not a number", "cpu: two", []string{`4:10: runners.r.cpu: expected an integer, got "two"`}},
		{"cpu float", "cpu: 1.5", []string{"4:10: runners.r.cpu: expected an integer, got 1.5"}},
		{"cpu mapping", "cpu: {min: 2}", []string{"4:10: runners.r.cpu: expected an integer or a list of integers, got a mapping"}},
		{"cpu empty list", "cpu: []", []string{"4:10: runners.r.cpu: cpu list is empty (omit cpu to allow any)"}},
		{"ram null", "ram:", []string{"4:9: runners.r.ram: expected an integer or a list of integers, got nothing"}},
		{"ram string in list", "ram: [4, lots]", []string{`4:14: runners.r.ram[1]: expected an integer, got "lots"`}},
		{"family not a family", "family: [c7a, \"C7A$\"]", []string{`4:19: runners.r.family[1]: family "C7A$": want an instance family, a type or a pattern like m7* (lower-case letters, digits, '-', '.', '*', '?')`}},
		{"family empty list", "family: []", []string{"4:13: runners.r.family: family list is empty (omit family to allow any)"}},
		{"family number in list ok, bool not", "family: [t3, true]", []string{"4:18: runners.r.family[1]: expected a non-empty string, got true"}},
		{"volume without size", "volume: gp3", []string{`4:13: runners.r.volume: bad volume "gp3": expected TYPE:SIZEgb[:THROUGHPUTmbps][:IOPSiops], e.g. gp3:30gb:125mbps:3000iops`}},
		{"volume too many parts", "volume: gp3:30gb:125mbps:3000iops:x", []string{`4:13: runners.r.volume: bad volume "gp3:30gb:125mbps:3000iops:x": expected TYPE:SIZEgb[:THROUGHPUTmbps][:IOPSiops], e.g. gp3:30gb:125mbps:3000iops`}},
		{"volume bad type", "volume: gp4:30gb", []string{`4:13: runners.r.volume: bad volume "gp4:30gb": type "gp4" is not one of gp2, gp3, io1, io2, st1, sc1, standard`}},
		{"volume size without unit", "volume: gp3:30", []string{`4:13: runners.r.volume: bad volume "gp3:30": size "30" is not a size such as 30gb (at most 1048576gb)`}},
		{"volume size zero", "volume: gp3:0gb", []string{`4:13: runners.r.volume: bad volume "gp3:0gb": size "0gb" is not a size such as 30gb (at most 1048576gb)`}},
		{"volume bad throughput", "volume: gp3:30gb:fastmbps", []string{`4:13: runners.r.volume: bad volume "gp3:30gb:fastmbps": part "fastmbps" is not one throughput such as 125mbps and one IOPS such as 3000iops`}},
		{"volume iops twice", "volume: gp3:30gb:3000iops:4000iops", []string{`4:13: runners.r.volume: bad volume "gp3:30gb:3000iops:4000iops": part "4000iops" is not one throughput such as 125mbps and one IOPS such as 3000iops`}},
		{"volume several bad parts", "volume: gp9:big", []string{
			`4:13: runners.r.volume: bad volume "gp9:big": type "gp9" is not one of gp2, gp3, io1, io2, st1, sc1, standard`,
			`4:13: runners.r.volume: bad volume "gp9:big": size "big" is not a size such as 30gb (at most 1048576gb)`,
		}},
		{"volume not a string", "volume: [gp3]", []string{"4:13: runners.r.volume: expected a non-empty string, got a list"}},
		{"spot unknown strategy", "spot: cheapest", []string{`4:11: runners.r.spot: bad spot value "cheapest" ` + spotExpected}},
		{"spot number", "spot: 1", []string{`4:11: runners.r.spot: bad spot value 1 ` + spotExpected}},
		{"retry unknown", "retry: always", []string{`4:12: runners.r.retry: bad retry value "always" (expected when-interrupted or false)`}},
		{"retry true", "retry: true", []string{`4:12: runners.r.retry: bad retry value true (expected when-interrupted or false)`}},
		{"retry a list", "retry: [false]", []string{`4:12: runners.r.retry: bad retry value a list (expected when-interrupted or false)`}},
		{"unknown key", "colour: red", []string{`4:5: runners.r: unknown key "colour" in runner (known: image, cpu, ram, family, volume, spot, retry)`}},
		{"duplicate key", "image: debian", []string{`4:5: runners.r: duplicate key "image" in runner (first at line 3)`}},
	}
	checkProblems(t, runnerWith, cases)
}

func TestRunnerSectionProblems(t *testing.T) {
	cases := []problemCase{
		{"missing image", "runners:\n  r:\n    cpu: 2\n",
			[]string{`2:3: runners.r: missing required key "image" in runner`}},
		{"empty image", "runners:\n  r:\n    image: \"\"\n",
			[]string{`3:12: runners.r.image: expected a non-empty string, got ""`}},
		{"runner is not a mapping", "runners:\n  r: ubuntu\n",
			[]string{`2:6: runners.r: expected a mapping for the runner, got "ubuntu"`}},
		{"runners is a list", "runners:\n  - r\n",
			[]string{`2:3: runners: expected a mapping of runners, got a list`}},
		{"duplicate runner", "runners:\n  r:\n    image: a\n  r:\n    image: b\n",
			[]string{`4:3: runners: duplicate key "r" in runners (first at line 2)`}},
		{"runner name unusable in a label", "runners:\n  a/b:\n    image: a\n",
			[]string{`2:3: runners.a/b: bad runner name "a/b" (names may not be empty or contain spaces, "/", "=" or ",")`}},
	}
	checkProblems(t, withPools, cases)
}

func TestRunsOnOnlyRunnerKeysLoadWithAWarning(t *testing.T) {
	cfg, err := Parse("runs-on.yml", []byte(`runners:
  small:
    image: ubuntu24-full-x64
    ssh: false
    extras: s3-cache
pools: {}
`))
	if err != nil {
		t.Fatalf("a RunsOn file with RunsOn-only keys must load: %v", err)
	}
	want := "runs-on.yml:4:5: runners.small: \"ssh\" is a RunsOn setting bullpen does not use; ignored\n" +
		"runs-on.yml:5:5: runners.small: \"extras\" is a RunsOn setting bullpen does not use; ignored"
	if got := cfg.Warnings.Error(); got != want {
		t.Fatalf("warnings\n got: %s\nwant: %s", got, want)
	}
}

// The hooks and settings of a RunsOn file that bullpen does not act on
// (scripts on images and runners, nested virtualisation) load with a
// warning each, so that an existing file works unchanged.
func TestRunsOnHooksLoadWithAWarning(t *testing.T) {
	cfg, err := Parse("runs-on.yml", []byte(`images:
  with-hooks:
    platform: linux
    arch: x64
    owner: "135269210855"
    name: runs-on-v2.2-ubuntu22-full-x64-*
    preinstall: |
      echo hello
    prerun: echo again
runners:
  r:
    image: with-hooks
    nested-virt: true
    prerun: echo hi
pools: {}
`))
	if err != nil {
		t.Fatalf("a RunsOn file with hooks must load: %v", err)
	}
	want := []string{
		`runs-on.yml:7:5: images.with-hooks: "preinstall" is a RunsOn setting bullpen does not use; ignored`,
		`runs-on.yml:9:5: images.with-hooks: "prerun" is a RunsOn setting bullpen does not use; ignored`,
		`runs-on.yml:13:5: runners.r: "nested-virt" is a RunsOn setting bullpen does not use; ignored`,
		`runs-on.yml:14:5: runners.r: "prerun" is a RunsOn setting bullpen does not use; ignored`,
	}
	sameLines(t, "runs-on.yml", strings.Split(cfg.Warnings.Error(), "\n"), want)
	if got := cfg.Runners["r"].Image; got != "135269210855/runs-on-v2.2-ubuntu22-full-x64-*" {
		t.Errorf("the runner's image is %q, want its entry's reference", got)
	}
}
