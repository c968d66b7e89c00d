package labels

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

// FuzzParse checks that no labels make Parse panic, and that what it
// returns keeps its promises. The fuzzed text holds one label per line;
// withPools says whether the environment has pools (dependabot among them).
func FuzzParse(f *testing.F) {
	seeds := []string{
		"runs-on=1234567/pool=small-x64",
		"runs-on/pool=small-x64",
		"runs-on\nrunner=2cpu-linux-x64\nenv=dev",
		"runs-on=99,cpu=4,ram=16,family=c7a+m7a,image=ubuntu24-full-x64,spot=false",
		"self-hosted\ndependabot",
		"runs-on/volume=gp3:30gb:125mbps:3000iops/region=eu-west-1/spot=pco",
		"runs-on/disk=large/ssh=false/private=true/extras=s3-cache/retry=when-interrupted\ntag=a\ntags=b+c",
		"runs-on=3/pool=small-x64/cpu=4/runner=r/env=prod",
		"dependabot\nruns-on/pool=small-x64",
		"", "\n", "runs-on=", "=", "//", ",,", "runs-on/pool=", "runs-on//", "runs-on=0", "runs-on=-1",
		"runs-on=99999999999999999999999", "runs-on/cpu=+", "runs-on/cpu=2++8", "runs-on/volume=:::",
		"runs-on/volume=gp3:0gb", "runs-on/env=dév\nregion=ünï", "runs-on/env=\xff\xfe", "RUNS-ON/POOL=SMALL-X64",
		"runs-on/pool=small-x64\nruns-on/pool=cheap", "runs-on/env=a=b", "runs-on/ env = ", "runs-on\x00/pool=\x00",
		"runs-on/" + strings.Repeat("cpu=4/", 2000), "runs-on/pool=" + strings.Repeat("é", 5000),
	}
	for _, s := range seeds {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, text string, withPools bool) {
		labels := strings.Split(text, "\n")
		exists := func(string) bool { return false }
		if withPools {
			exists = testPools
		}
		r, err := Parse(labels, exists)
		checkRequest(t, labels, r, err)

		again, againErr := Parse(labels, exists)
		if !reflect.DeepEqual(r, again) || !reflect.DeepEqual(err, againErr) {
			t.Fatalf("Parse is not deterministic: %+v, %v then %+v, %v", r, err, again, againErr)
		}
		// Another system's bare label changes nothing.
		more, moreErr := Parse(append(slices.Clone(labels), "self-hosted"), exists)
		if !reflect.DeepEqual(r, more) || !reflect.DeepEqual(err, moreErr) {
			t.Fatalf("adding a bare label changed %+v, %v into %+v, %v", r, err, more, moreErr)
		}
		// A valid request does not depend on the order of its labels.
		if err == nil {
			reversed := slices.Clone(labels)
			slices.Reverse(reversed)
			if rev, revErr := Parse(reversed, exists); revErr != nil || !reflect.DeepEqual(r, rev) {
				t.Fatalf("reversed labels give %+v, %v; want %+v", rev, revErr, r)
			}
		}
	})
}

// checkRequest asserts what any result of Parse promises.
func checkRequest(t *testing.T, labels []string, r Request, err error) {
	t.Helper()
	if !r.Ours {
		if err != nil || !reflect.DeepEqual(r, Request{}) {
			t.Fatalf("not ours, yet %+v, %v", r, err)
		}
		return
	}
	if err != nil {
		var lerr *Error
		if !errors.As(err, &lerr) || !slices.Contains(labels, lerr.Label) || lerr.Problem == "" {
			t.Fatalf("error %#v is not an *Error naming one of the labels", err)
		}
		if len(err.Error()) > 2000 {
			t.Fatalf("error of %d bytes: long labels must be cut short", len(err.Error()))
		}
		return
	}
	if r.RunID < 0 || r.Spec.CPU.Min > r.Spec.CPU.Max || r.Spec.RAM.Min > r.Spec.RAM.Max {
		t.Fatalf("inconsistent request %+v", r)
	}
	if r.Pool != "" && (r.Runner != "" || !r.Spec.IsZero()) {
		t.Fatalf("a pool request keeps machine settings: %+v", r)
	}
	if !slices.IsSorted(r.Ignored) || len(slices.Compact(slices.Clone(r.Ignored))) != len(r.Ignored) {
		t.Fatalf("ignored keys not sorted and distinct: %q", r.Ignored)
	}
	base := small
	spec := r.ColdSpec(base)
	class := r.Class(base)
	if spec.Name != class || class == "" {
		t.Fatalf("cold spec name %q, class %q", spec.Name, class)
	}
	if r.Spec.IsZero() && class != base.Name {
		t.Fatalf("no overrides, yet class %q", class)
	}
	if (class == base.Name) != reflect.DeepEqual(canonical(spec), canonical(base)) {
		t.Fatalf("class %q but spec %+v over base %+v", class, spec, base)
	}
	if r.Class(domain.RunnerSpec{}) == "" {
		t.Fatalf("empty class over an empty base")
	}
}
