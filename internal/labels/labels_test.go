package labels

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// pools is the environment the tests parse in.
func pools(names ...string) func(string) bool {
	return func(name string) bool { return slices.Contains(names, name) }
}

var testPools = pools("small-x64", "cheap-x64", "dependabot")

func strategy(s string) *string { return &s }

func TestParseForms(t *testing.T) {
	cases := []struct {
		name   string
		labels []string
		exists func(string) bool
		want   Request
	}{
		{"pinned pool", []string{"runs-on=1234567/pool=small-x64"}, testPools,
			Request{Ours: true, RunID: 1234567, Pool: "small-x64"}},
		{"unpinned pool", []string{"runs-on/pool=small-x64"}, testPools,
			Request{Ours: true, Pool: "small-x64"}},
		{"comma separates pairs too", []string{"runs-on=7,pool=cheap-x64"}, testPools,
			Request{Ours: true, RunID: 7, Pool: "cheap-x64"}},
		{"separators mix", []string{"runs-on=7/pool=cheap-x64,env=dev"}, testPools,
			Request{Ours: true, RunID: 7, Pool: "cheap-x64", Env: "dev"}},
		{"bare runs-on alone", []string{"runs-on"}, nil, Request{Ours: true}},
		{"runner and env in separate labels", []string{"runs-on", "runner=2cpu-linux-x64", "env=dev"}, nil,
			Request{Ours: true, Runner: "2cpu-linux-x64", Env: "dev"}},
		{"ad-hoc machine", []string{"runs-on=99,cpu=4,ram=16,family=c7a+m7a,image=ubuntu24-full-x64,spot=false"}, nil,
			Request{Ours: true, RunID: 99, Spec: SpecOverrides{
				CPU: domain.Range{Min: 4, Max: 4}, RAM: domain.Range{Min: 16, Max: 16},
				Family: []string{"c7a", "m7a"}, Image: "ubuntu24-full-x64", Spot: strategy(""),
			}}},
		{"cpu range", []string{"runs-on/cpu=2+8"}, nil,
			Request{Ours: true, Spec: SpecOverrides{CPU: domain.Range{Min: 2, Max: 8}}}},
		{"ram list spans smallest to largest", []string{"runs-on/ram=32+8+16"}, nil,
			Request{Ours: true, Spec: SpecOverrides{RAM: domain.Range{Min: 8, Max: 32}}}},
		{"family repeats dropped", []string{"runs-on/family=m7a+c7a+m7a"}, nil,
			Request{Ours: true, Spec: SpecOverrides{Family: []string{"m7a", "c7a"}}}},
		{"spot true is price-capacity-optimized", []string{"runs-on/spot=true"}, nil,
			Request{Ours: true, Spec: SpecOverrides{Spot: strategy("price-capacity-optimized")}}},
		{"spot pco is normalised", []string{"runs-on/spot=PCO"}, nil,
			Request{Ours: true, Spec: SpecOverrides{Spot: strategy("price-capacity-optimized")}}},
		{"spot strategy", []string{"runs-on/spot=lowest-price"}, nil,
			Request{Ours: true, Spec: SpecOverrides{Spot: strategy("lowest-price")}}},
		{"volume full", []string{"runs-on/volume=gp3:30gb:125mbps:3000iops"}, nil,
			Request{Ours: true, Spec: SpecOverrides{Volume: domain.Volume{Type: "gp3", SizeGB: 30, ThroughputMBps: 125, IOPS: 3000}}}},
		{"volume iops before throughput, upper case", []string{"runs-on/volume=IO2:100GB:4000IOPS:250MBPS"}, nil,
			Request{Ours: true, Spec: SpecOverrides{Volume: domain.Volume{Type: "io2", SizeGB: 100, ThroughputMBps: 250, IOPS: 4000}}}},
		{"volume type and size", []string{"runs-on/volume=gp3:60gb"}, nil,
			Request{Ours: true, Spec: SpecOverrides{Volume: domain.Volume{Type: "gp3", SizeGB: 60}}}},
		{"region", []string{"runs-on=5/region=eu-west-1"}, nil, Request{Ours: true, RunID: 5, Region: "eu-west-1"}},
		{"RunsOn-only keys accepted and ignored",
			[]string{"runs-on/disk=large/ssh=false/private=true/extras=s3-cache/retry=when-interrupted", "tag=a", "tags=b+c"}, nil,
			Request{Ours: true, Ignored: []string{"disk", "extras", "private", "retry", "ssh", "tag", "tags"}}},
		{"pool ignores machine keys but keeps env and region",
			[]string{"runs-on=3/pool=small-x64/cpu=4/ram=8/family=m7a/image=x/spot=true/volume=gp3:9gb/runner=r/env=prod/region=us-east-1/ssh=true"},
			testPools, Request{Ours: true, RunID: 3, Pool: "small-x64", Env: "prod", Region: "us-east-1",
				Ignored: []string{"cpu", "family", "image", "ram", "runner", "spot", "ssh", "volume"}}},
		{"dependabot expands to its pool", []string{"self-hosted", "dependabot"}, testPools,
			Request{Ours: true, Pool: DependabotPool}},
		{"dependabot label is case-insensitive", []string{"Dependabot"}, testPools,
			Request{Ours: true, Pool: DependabotPool}},
		{"dependabot with runs-on and env", []string{"dependabot", "runs-on=12", "env=dev"}, testPools,
			Request{Ours: true, RunID: 12, Pool: DependabotPool, Env: "dev"}},
		{"dependabot agrees with pool=dependabot", []string{"dependabot", "runs-on/pool=dependabot"}, testPools,
			Request{Ours: true, Pool: DependabotPool}},
		{"dependabot without the pool is a plain label", []string{"runs-on", "dependabot"}, pools("small-x64"),
			Request{Ours: true}},
		{"bare labels of others are left alone", []string{"self-hosted", "linux", "x64", "runs-on/cpu=2", "ubuntu/22.04"}, nil,
			Request{Ours: true, Spec: SpecOverrides{CPU: domain.Range{Min: 2, Max: 2}}}},
		{"keys are case-insensitive, values kept", []string{"Runs-On=8/Pool=small-x64", "ENV=Dev"}, testPools,
			Request{Ours: true, RunID: 8, Pool: "small-x64", Env: "Dev"}},
		{"spaces around pairs are trimmed", []string{"runs-on=8/pool=small-x64, env = dev "}, testPools,
			Request{Ours: true, RunID: 8, Pool: "small-x64", Env: "dev"}},
		{"a key repeated with the same value", []string{"runs-on=8/env=dev", "env=dev", "runs-on"}, nil,
			Request{Ours: true, RunID: 8, Env: "dev"}},
		{"run id repeated across labels", []string{"runs-on=8", "runs-on=8/pool=small-x64"}, testPools,
			Request{Ours: true, RunID: 8, Pool: "small-x64"}},
		{"unicode values", []string{"runs-on/env=dév", "region=ünï"}, nil,
			Request{Ours: true, Env: "dév", Region: "ünï"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(c.labels, c.exists)
			if err != nil {
				t.Fatalf("Parse(%q): %v", c.labels, err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Parse(%q)\n got  %+v\n want %+v", c.labels, got, c.want)
			}
		})
	}
}

func TestParseNotOurs(t *testing.T) {
	cases := []struct {
		name   string
		labels []string
		exists func(string) bool
	}{
		{"no labels", nil, testPools},
		{"GitHub-hosted", []string{"ubuntu-latest"}, testPools},
		{"plain self-hosted", []string{"self-hosted", "linux", "x64"}, testPools},
		{"odd pairs without runs-on", []string{"self-hosted", "cpu=four", "pool=nope", "=", "//"}, testPools},
		{"dependabot without its pool", []string{"self-hosted", "dependabot"}, pools("small-x64")},
		{"dependabot with no pools known", []string{"dependabot"}, nil},
		{"runs-on only later in a label", []string{"pool=small-x64/runs-on=1"}, testPools},
		{"a longer key that starts like runs-on", []string{"runs-on-ubuntu", "runs-onx=1/pool=small-x64"}, testPools},
		{"empty label", []string{""}, testPools},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(c.labels, c.exists)
			if err != nil || !reflect.DeepEqual(got, Request{}) {
				t.Errorf("Parse(%q) = %+v, %v; want a zero request and no error", c.labels, got, err)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	known := "(known keys: " + strings.Join(knownKeys, ", ") + ")"
	long := "runs-on/pool=" + strings.Repeat("ab", 200)
	cases := []struct {
		name   string
		labels []string
		want   string
	}{
		{"cpu not a number", []string{"runs-on=1/cpu=four"}, `label "runs-on=1/cpu=four": cpu: "four" is not a number`},
		{"cpu zero", []string{"runs-on/cpu=0"}, `label "runs-on/cpu=0": cpu: "0" is out of range (1 to 1048576)`},
		{"cpu too large", []string{"runs-on/cpu=99999999999999999999999"},
			`label "runs-on/cpu=99999999999999999999999": cpu: "99999999999999999999999" is out of range (1 to 1048576)`},
		{"cpu negative", []string{"runs-on/cpu=-2"}, `label "runs-on/cpu=-2": cpu: "-2" is not a number`},
		{"cpu range with an empty end", []string{"runs-on/cpu=2+"}, `label "runs-on/cpu=2+": cpu: empty item in "2+"`},
		{"ram not a number", []string{"runs-on", "ram=16gb"}, `label "ram=16gb": ram: "16gb" is not a number`},
		{"family with an empty item", []string{"runs-on/family=c7a++m7a"}, `label "runs-on/family=c7a++m7a": family: empty item in "c7a++m7a"`},
		{"spot unknown", []string{"runs-on/spot=maybe"},
			`label "runs-on/spot=maybe": spot: "maybe" is not a spot setting (expected true, false, pco, price-capacity-optimized, lowest-price, capacity-optimized)`},
		{"volume without a size", []string{"runs-on/volume=gp3"},
			`label "runs-on/volume=gp3": volume: expected ` + domain.VolumeForm},
		{"volume type unknown", []string{"runs-on/volume=gp9:30gb"},
			`label "runs-on/volume=gp9:30gb": volume: type "gp9" is not one of gp2, gp3, io1, io2, st1, sc1, standard`},
		{"volume size without unit", []string{"runs-on/volume=gp3:30"},
			`label "runs-on/volume=gp3:30": volume: size "30" is not a size such as 30gb (at most 1048576gb)`},
		{"volume two throughputs", []string{"runs-on/volume=gp3:30gb:125mbps:250mbps"},
			`label "runs-on/volume=gp3:30gb:125mbps:250mbps": volume: part "250mbps" is not one throughput such as 125mbps and one IOPS such as 3000iops`},
		{"run id not a number", []string{"runs-on=abc/pool=small-x64"}, `label "runs-on=abc/pool=small-x64": runs-on: "abc" is not a run id (a positive integer)`},
		{"run id zero", []string{"runs-on=0"}, `label "runs-on=0": runs-on: "0" is not a run id (a positive integer)`},
		{"run id signed", []string{"runs-on=+5"}, `label "runs-on=+5": runs-on: "+5" is not a run id (a positive integer)`},
		{"run id empty", []string{"runs-on="}, `label "runs-on=": runs-on: empty value (expected the workflow run id, a positive integer)`},
		{"runs-on not first", []string{"runs-on", "env=dev/runs-on=4"}, `label "env=dev/runs-on=4": runs-on: must open its label, as in runs-on=RUN_ID/pool=NAME`},
		{"empty pool", []string{"runs-on/pool="}, `label "runs-on/pool=": pool: empty value (expected a pool name)`},
		{"pool with a space", []string{"runs-on/pool=a b"}, `label "runs-on/pool=a b": pool: "a b" is not a name (names have no spaces or control characters)`},
		{"unknown pool", []string{"runs-on=1/pool=nope"}, `label "runs-on=1/pool=nope": pool: pool "nope" does not exist in this environment`},
		{"unknown key", []string{"runs-on/gpu=1"}, `label "runs-on/gpu=1": unknown key "gpu" ` + known},
		{"unknown key in another label", []string{"runs-on", "foo=bar"}, `label "foo=bar": unknown key "foo" ` + known},
		{"empty key", []string{"runs-on", "="}, `label "=": unknown key "" ` + known},
		{"bare word among pairs", []string{"runs-on/linux"}, `label "runs-on/linux": expected key=value, got "linux"`},
		{"stray separator", []string{"runs-on//pool=small-x64"}, `label "runs-on//pool=small-x64": empty pair (a stray "/" or ","?)`},
		{"trailing separator", []string{"runs-on,"}, `label "runs-on,": empty pair (a stray "/" or ","?)`},
		{"conflicting env", []string{"runs-on/env=dev", "env=prod"}, `label "env=prod": env: "prod" conflicts with "dev" given in label "runs-on/env=dev"`},
		{"conflicting run ids", []string{"runs-on=1", "runs-on=2"}, `label "runs-on=2": runs-on: "2" conflicts with "1" given in label "runs-on=1"`},
		{"dependabot against another pool", []string{"dependabot", "runs-on/pool=small-x64"},
			`label "runs-on/pool=small-x64": pool: "small-x64" conflicts with "dependabot" given in label "dependabot"`},
		{"invalid UTF-8", []string{"runs-on/env=\xff"}, `label "runs-on/env=\xff": not valid UTF-8`},
		{"a long label reads fine; the conflict after it is reported", []string{long, "env=a", "env=b"},
			`label "env=b": env: "b" conflicts with "a" given in label "env=a"`},
		{"a long bad label is cut short", []string{long + " x"},
			`label "runs-on/pool=` + strings.Repeat("ab", 43) + `a"… (415 bytes): pool: "` + strings.Repeat("ab", 50) + `"… (402 bytes) is not a name (names have no spaces or control characters)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(c.labels, testPools)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want error %s", c.labels, got, c.want)
			}
			if err.Error() != c.want {
				t.Errorf("Parse(%q) error\n got  %s\n want %s", c.labels, err, c.want)
			}
			var lerr *Error
			if !errors.As(err, &lerr) || !slices.Contains(c.labels, lerr.Label) {
				t.Errorf("error %v is not an *Error naming one of the labels", err)
			}
			if !got.Ours {
				t.Errorf("a request with an error should still say it is ours")
			}
			if errors.Is(err, ErrUnknownPool) != (c.name == "unknown pool") {
				t.Errorf("errors.Is(%v, ErrUnknownPool) = %v", err, errors.Is(err, ErrUnknownPool))
			}
		})
	}
}

func TestParseUnknownPoolKeepsTheRecord(t *testing.T) {
	got, err := Parse([]string{"runs-on=42/pool=nope", "env=dev"}, testPools)
	if !errors.Is(err, ErrUnknownPool) {
		t.Fatalf("error %v, want ErrUnknownPool", err)
	}
	want := Request{Ours: true, RunID: 42, Pool: "nope", Env: "dev"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestParseDoesNotAskAboutPoolsForOtherJobs(t *testing.T) {
	asked := 0
	exists := func(string) bool { asked++; return true }
	if _, err := Parse([]string{"self-hosted", "linux"}, exists); err != nil || asked != 0 {
		t.Errorf("err %v, asked %d times; want no error and no question", err, asked)
	}
}
