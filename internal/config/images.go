package config

import (
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bullpen-ci/bullpen/internal/spelling"
)

// Image is one entry of the optional top-level `images:` map (RunsOn custom
// images): either a fixed AMI id, or an AMI name pattern and its owner.
type Image struct {
	AMI      string // e.g. ami-0123456789abcdef0
	Name     string // AMI name, may hold wildcards: ubuntu24-custom-*
	Owner    string // AWS account that owns the AMI
	Platform string // linux or windows
	Arch     string // x64 or arm64
}

// Ref is the image reference the cloud providers resolve: the AMI id, or
// OWNER/NAME, or, without an owner, NAME alone, which the provider looks up
// among the owners it is configured with (--aws-image-owners). Platform and
// arch are RunsOn's description of the image; no lookup uses them.
func (img Image) Ref() string {
	switch {
	case img.AMI != "":
		return img.AMI
	case img.Owner != "":
		return img.Owner + "/" + img.Name
	}
	return img.Name
}

// ImageRef is the reference the providers resolve for an image as a
// configuration or a job label names it: the Ref of the `images:` entry of
// that key, or name itself (an AMI id, OWNER/NAME, or a name the provider
// looks up). Runners' images are already resolved by Parse.
func (c *Config) ImageRef(name string) string {
	if img, ok := c.Images[name]; ok {
		return img.Ref()
	}
	return name
}

// runnerImage reads a runner's image: a key of `images:` becomes its
// entry's reference, so that what reaches the provider, and the pool's spec
// hash, is what the entry says; anything else is kept as written.
func (p *parser) runnerImage(path string, n *yaml.Node) string {
	s, ok := p.str(path, n)
	if !ok {
		return ""
	}
	if img, ok := p.images[s]; ok {
		return img.Ref()
	}
	if key := p.nearImageKey(s); key != "" {
		p.warnf(deref(n), path, "image %q is not a key of images: (did you mean %q?); the cloud will look it up as an AMI name", s, key)
	}
	return s
}

// nearImageKey returns the key of `images:` that name looks like a
// misspelling of, or "". AMI ids and OWNER/NAME references are meant as
// written.
func (p *parser) nearImageKey(name string) string {
	if strings.HasPrefix(name, "ami-") || strings.Contains(name, "/") {
		return ""
	}
	for _, key := range slices.Sorted(maps.Keys(p.images)) {
		d := spelling.Distance(strings.ToLower(name), strings.ToLower(key))
		// A third of the key may differ at most, so that short keys do not
		// make every short name look like a typo.
		if d <= 2 && d*3 <= len(key) {
			return key
		}
	}
	return ""
}

func (p *parser) imageEntries(n *yaml.Node) map[string]Image {
	out := make(map[string]Image)
	p.entries("images", "images", n, func(k, v *yaml.Node) {
		out[k.Value] = p.image(join("images", k.Value), k, v)
	})
	return out
}

func (p *parser) image(path string, at, n *yaml.Node) Image {
	var img Image
	var nameAt *yaml.Node
	badAMI := false // already reported: not also "needs ami"
	oneOf := func(dst *string, allowed ...string) func(string, *yaml.Node) {
		return func(path string, v *yaml.Node) {
			s, ok := p.str(path, v)
			if ok && len(allowed) > 0 && !slices.Contains(allowed, s) {
				p.errorf(deref(v), path, "bad value %q (expected %s)", s, strings.Join(allowed, " or "))
				return
			}
			*dst = s
		}
	}
	p.fields(path, "image", at, n, []field{
		{key: "ami", parse: func(path string, v *yaml.Node) {
			if s, ok := p.str(path, v); ok && !strings.HasPrefix(s, "ami-") {
				p.errorf(deref(v), path, "ami %q is not an AMI id (ami-…); to look an image up by name, give name and owner", s)
				badAMI = true
			} else {
				img.AMI = s
			}
		}},
		{key: "name", parse: func(path string, v *yaml.Node) { nameAt = deref(v); oneOf(&img.Name)(path, v) }},
		{key: "owner", parse: func(path string, v *yaml.Node) {
			if s, ok := p.str(path, v); ok && strings.ContainsAny(s, "/ \t") {
				p.errorf(deref(v), path, "owner %q is not an AWS account id or alias (self, amazon, aws-marketplace)", s)
			} else {
				img.Owner = s
			}
		}},
		{key: "platform", parse: oneOf(&img.Platform, "linux", "windows")},
		{key: "arch", parse: oneOf(&img.Arch, "x64", "arm64")},
		// RunsOn's scripts for machines booted from the image: bullpen's
		// agent runs none of them.
		{key: "preinstall", ignored: true},
		{key: "prerun", ignored: true},
	})
	if n := deref(n); n != nil && n.Kind == yaml.MappingNode {
		switch {
		case img.AMI == "" && img.Name == "" && !badAMI:
			p.errorf(at, path, "image needs ami (an AMI id) or name (an AMI name pattern)")
		case img.AMI != "" && img.Name != "":
			p.errorf(at, path, "image has both ami and name (give one)")
		case img.Owner == "" && strings.Contains(img.Name, "/"):
			// The provider would read the part before "/" as the owner.
			p.errorf(nameAt, join(path, "name"), "name %q holds a \"/\": give owner too", img.Name)
		}
	}
	return img
}
