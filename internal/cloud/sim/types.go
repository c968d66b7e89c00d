package sim

import (
	"cmp"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// catalogueFamilies are the families a runner without one may launch, and
// those a pattern ("m7*", "*") matches: the x86 families the shipped
// price table of internal/simulate prices (the images the simulated cloud
// boots are taken as x64). A family named outright need not be listed:
// its shapes follow from its name (see shapesOf).
var catalogueFamilies = []string{"c6i", "c7a", "c7i", "m6i", "m7a", "m7i", "m7i-flex", "t3", "t3a"}

// shape is what choosing a type needs to know of it, as
// DescribeInstanceTypes tells the EC2 provider.
type shape struct {
	name string
	// vcpus and memMiB are 0 when unknown, which constrains nothing.
	vcpus, memMiB int
}

// burstableSizes are the t3 and t3a sizes: two vCPUs up to large, memory
// from half a GiB.
var burstableSizes = []shape{
	{"nano", 2, 512}, {"micro", 2, 1024}, {"small", 2, 2048}, {"medium", 2, 4096},
	{"large", 2, 8192}, {"xlarge", 4, 16384}, {"2xlarge", 8, 32768},
}

// vcpusBySize are the other families' sizes; medium only in the families
// that have it (see hasMedium).
var vcpusBySize = []struct {
	size  string
	vcpus int
}{
	{"medium", 1}, {"large", 2}, {"xlarge", 4}, {"2xlarge", 8}, {"4xlarge", 16}, {"8xlarge", 32},
	{"12xlarge", 48}, {"16xlarge", 64}, {"24xlarge", 96}, {"32xlarge", 128}, {"48xlarge", 192},
}

// shapesOf lists a family's types: the burstable table for t families,
// otherwise every size with the memory per vCPU of the family's class
// (c 2 GiB, m 4, r 8, x 16, any other 4).
func shapesOf(family string) []shape {
	class := strings.TrimRight(family, "abcdefghijklmnopqrstuvwxyz-")
	class = strings.TrimRight(class, "0123456789")
	if class == "" {
		class = family
	}
	var out []shape
	if class == "t" {
		for _, s := range burstableSizes {
			out = append(out, shape{family + "." + s.name, s.vcpus, s.memMiB})
		}
		return out
	}
	perVCPU := map[string]int{"c": 2, "m": 4, "r": 8, "x": 16}[class]
	if perVCPU == 0 {
		perVCPU = 4
	}
	for _, s := range vcpusBySize {
		if s.size == "medium" && !hasMedium(family) {
			continue
		}
		out = append(out, shape{family + "." + s.size, s.vcpus, s.vcpus * perVCPU * 1024})
	}
	return out
}

// hasMedium: the one-vCPU size exists in AMD families from the 7th
// generation (m7a) and in Graviton ones (c7g).
func hasMedium(family string) bool {
	digits := strings.IndexAny(family, "0123456789")
	if digits < 0 {
		return false
	}
	rest := family[digits:]
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		return false
	}
	gen, _ := strconv.Atoi(rest[:end])
	attrs := rest[end:]
	return strings.HasPrefix(attrs, "g") || attrs == "a" && gen >= 7
}

// shapeOfType is the shape of a type named outright ("c7a.2xlarge"); a
// size the catalogue does not know ("metal-48xl") leaves its shape
// unknown, constraining nothing.
func shapeOfType(name string) shape {
	family, _, _ := strings.Cut(name, ".")
	for _, s := range shapesOf(family) {
		if s.name == name {
			return s
		}
	}
	return shape{name: name}
}

// candidates are the shapes r's family entries name: a pattern ("m7*",
// "c7a.*") matches the catalogue's families and types, a type ("t3.micro")
// is itself, any other entry is a family.
func candidates(r domain.RunnerSpec) []shape {
	families := r.Family
	if len(families) == 0 {
		families = []string{"*"} // as the EC2 provider takes any current type
	}
	seen := map[string]bool{}
	var out []shape
	add := func(ss ...shape) {
		for _, s := range ss {
			if !seen[s.name] {
				seen[s.name] = true
				out = append(out, s)
			}
		}
	}
	for _, f := range families {
		switch {
		case strings.ContainsAny(f, "*?["):
			for _, known := range catalogueFamilies {
				if ok, _ := path.Match(f, known); ok {
					add(shapesOf(known)...)
					continue
				}
				for _, s := range shapesOf(known) {
					if ok, _ := path.Match(f, s.name); ok {
						add(s)
					}
				}
			}
		case strings.Contains(f, "."):
			add(shapeOfType(f))
		default:
			add(shapesOf(f)...)
		}
	}
	return out
}

// InstanceType is the type the simulated cloud launches for r, chosen as
// the EC2 provider chooses: of the types of r's families whose vCPUs and
// memory are within r's cpu and ram ranges, the first by fewest vCPUs,
// then least memory, then name. (EC2's fleet then picks among the
// provider's list by its allocation strategy; the simulation takes the
// list's first.) The families come from a built-in catalogue: t3 and t3a
// from nano (2 vCPUs, 0.5 GiB) to 2xlarge; the others from large (2
// vCPUs; medium, 1 vCPU, in AMD 7th-generation and Graviton families) to
// 48xlarge, with 2 GiB per vCPU for c families, 4 for m, 8 for r. A runner
// without a family may be of any family of the catalogue. No fitting type
// is the EC2 provider's error, an Unsupported domain.ErrInvalidRequest.
func InstanceType(r domain.RunnerSpec) (string, error) {
	ram := ec2like.RAMMiB(r.RAM)
	var fit []shape
	for _, s := range candidates(r) {
		if (s.vcpus == 0 || ec2like.InRange(s.vcpus, r.CPU)) && (s.memMiB == 0 || ec2like.InRange(s.memMiB, ram)) {
			fit = append(fit, s)
		}
	}
	if len(fit) == 0 {
		return "", ec2like.Errorf(OpCreateFleet, "Unsupported", domain.ErrInvalidRequest,
			"no instance type of families %v with %s vCPUs and %s GiB", cmp.Or(strings.Join(r.Family, ","), "any"), ec2like.RangeText(r.CPU), ec2like.RangeText(r.RAM))
	}
	// A type of unknown size (named outright, not in the catalogue) comes
	// after every known fit: its zero vCPUs say nothing of its size.
	unknown := func(s shape) int {
		if s.vcpus == 0 || s.memMiB == 0 {
			return 1
		}
		return 0
	}
	best := slices.MinFunc(fit, func(a, b shape) int {
		return cmp.Or(cmp.Compare(unknown(a), unknown(b)), cmp.Compare(a.vcpus, b.vcpus), cmp.Compare(a.memMiB, b.memMiB), strings.Compare(a.name, b.name))
	})
	return best.name, nil
}
