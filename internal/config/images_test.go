package config

import (
	"reflect"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/domain"
)

func TestImages(t *testing.T) {
	src := `images:
  custom:
    platform: linux
    arch: arm64
    name: "my-ubuntu-*"
    owner: "123456789012"
  pinned:
    ami: ami-0123456789abcdef0
pools: {}
`
	cfg := mustParse(t, src)
	want := map[string]Image{
		"custom": {Name: "my-ubuntu-*", Owner: "123456789012", Platform: "linux", Arch: "arm64"},
		"pinned": {AMI: "ami-0123456789abcdef0"},
	}
	if !reflect.DeepEqual(cfg.Images, want) {
		t.Errorf("got %+v", cfg.Images)
	}
}

func TestImageProblems(t *testing.T) {
	checkProblems(t, withPools, []problemCase{
		{"neither ami nor name, bad arch", "images:\n  neither:\n    arch: x86\n", []string{
			`2:3: images.neither: image needs ami (an AMI id) or name (an AMI name pattern)`,
			`3:11: images.neither.arch: bad value "x86" (expected x64 or arm64)`,
		}},
		{"both, bad platform, unknown key", "images:\n  both:\n    ami: ami-1\n    name: x\n    platform: macos\n    size: 3\n", []string{
			`2:3: images.both: image has both ami and name (give one)`,
			`5:15: images.both.platform: bad value "macos" (expected linux or windows)`,
			`6:5: images.both: unknown key "size" in image (known: ami, name, owner, platform, arch)`,
		}},
		{"ami that is not an AMI id", "images:\n  i:\n    ami: my-ubuntu\n", []string{
			`3:10: images.i.ami: ami "my-ubuntu" is not an AMI id (ami-…); to look an image up by name, give name and owner`,
		}},
		{"owner holding a slash", "images:\n  i:\n    name: u-*\n    owner: 123/456\n", []string{
			`4:12: images.i.owner: owner "123/456" is not an AWS account id or alias (self, amazon, aws-marketplace)`,
		}},
		// The provider would take "ubuntu" for the owner.
		{"name with a slash and no owner", "images:\n  i:\n    name: ubuntu/images/hvm-ssd/*\n", []string{
			`3:11: images.i.name: name "ubuntu/images/hvm-ssd/*" holds a "/": give owner too`,
		}},
	})
}

// A runner's image that is a key of images: must reach the provider as the
// reference its entry gives, whichever section comes first in the file.
func TestRunnerImageNamesAnImagesEntry(t *testing.T) {
	cfg := mustParse(t, `runners:
  pinned: {image: pinned}
  pattern: {image: pattern}
  no-owner: {image: no-owner}
  runs-on: {image: ubuntu24-full-x64}
  by-id: {image: ami-0fedcba9876543210}
  by-owner: {image: "amazon/al2023-ami-*"}
images:
  pinned:
    ami: ami-0123456789abcdef0
  pattern:
    name: "ubuntu/images/hvm-ssd/ubuntu-noble-24.04-amd64-server-*"
    owner: "099720109477"
  no-owner:
    name: my-ubuntu-*
pools: {}
`)
	want := map[string]string{
		"pinned":   "ami-0123456789abcdef0",
		"pattern":  "099720109477/ubuntu/images/hvm-ssd/ubuntu-noble-24.04-amd64-server-*",
		"no-owner": "my-ubuntu-*",
		"runs-on":  "ubuntu24-full-x64",
		"by-id":    "ami-0fedcba9876543210",
		"by-owner": "amazon/al2023-ami-*",
	}
	for runner, ref := range want {
		if got := cfg.Runners[runner].Image; got != ref {
			t.Errorf("runner %s: image %q, want %q", runner, got, ref)
		}
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings: %v", cfg.Warnings)
	}
	for name, ref := range map[string]string{"pattern": want["pattern"], "ubuntu24-full-x64": "ubuntu24-full-x64"} {
		if got := cfg.ImageRef(name); got != ref {
			t.Errorf("ImageRef(%q) = %q, want %q", name, got, ref)
		}
	}
}

// The spec hash covers the runner's image: editing the images entry a pool's
// runner names must roll the pool, renaming the key must not.
func TestEditingAnImagesEntryChangesThePoolsSpecHash(t *testing.T) {
	hash := func(key, entry string) string {
		cfg := mustParse(t, "runners:\n  r: {image: "+key+"}\npools:\n  p: {runner: r}\nimages:\n  "+key+": "+entry+"\n")
		p, _ := cfg.Pool("p")
		return domain.SpecHash(cfg.Runners["r"], "ami-resolved", p)
	}
	base := hash("custom", "{name: my-ubuntu-*, owner: '123456789012'}")
	if hash("custom", "{name: my-ubuntu-*, owner: '210987654321'}") == base {
		t.Error("a new owner leaves the spec hash as it was")
	}
	if hash("custom", "{name: my-debian-*, owner: '123456789012'}") == base {
		t.Error("a new name leaves the spec hash as it was")
	}
	if hash("renamed", "{name: my-ubuntu-*, owner: '123456789012'}") != base {
		t.Error("renaming the key changes the spec hash")
	}
	if hash("custom", "{ami: ami-1}") == hash("custom", "{ami: ami-2}") {
		t.Error("a new ami leaves the spec hash as it was")
	}
}

func TestARunnerImageLikeAnImagesKeyIsWarnedAbout(t *testing.T) {
	cfg, err := Parse("runs-on.yml", []byte(`images:
  my-ubuntu: {ami: ami-0123456789abcdef0}
  x: {ami: ami-0123456789abcdef1}
runners:
  typo: {image: my-ubunut}
  case: {image: My-Ubuntu}
  short: {image: u}
  other: {image: ubuntu24-full-x64}
pools: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := "runs-on.yml:5:17: runners.typo.image: image \"my-ubunut\" is not a key of images: (did you mean \"my-ubuntu\"?); the cloud will look it up as an AMI name\n" +
		"runs-on.yml:6:17: runners.case.image: image \"My-Ubuntu\" is not a key of images: (did you mean \"my-ubuntu\"?); the cloud will look it up as an AMI name"
	if got := cfg.Warnings.Error(); got != want {
		t.Errorf("warnings\n got: %s\nwant: %s", got, want)
	}
	if got := cfg.Runners["typo"].Image; got != "my-ubunut" {
		t.Errorf("a name that is not a key is kept as written, got %q", got)
	}
}
