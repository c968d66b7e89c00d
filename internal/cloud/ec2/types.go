package ec2

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// MaxTypes bounds the instance types one fleet may choose from: with one
// override per subnet and type, more only lengthens the request.
const MaxTypes = 10

// maxOverrides is EC2's limit on a fleet's overrides.
const maxOverrides = 300

// typeInfo is what the type filter needs to know of an instance type.
type typeInfo struct {
	name    string
	vcpus   int
	memMiB  int
	archs   []string
	spot    bool // offered as spot
	current bool // current generation
}

// InstanceTypes returns the types a runner may launch as on an image of
// architecture arch: its families (RunsOn's syntax: "c7a", or a pattern
// like "m7*"), its cpu and ram ranges, cheapest first (fewest vCPUs, then
// least memory), at most MaxTypes. Types come from DescribeInstanceTypes,
// read once: an explicit list keeps each fleet's choice visible in its
// request and in the logs, where attribute-based selection would leave it
// to EC2.
func (c *Cloud) InstanceTypes(ctx context.Context, r domain.RunnerSpec, arch string) ([]string, error) {
	all, err := c.allTypes(ctx)
	if err != nil {
		return nil, err
	}
	var fit []typeInfo
	for _, t := range all {
		if matchesRunner(t, r, arch) {
			fit = append(fit, t)
		}
	}
	if len(fit) == 0 {
		return nil, &domain.CloudError{Op: ec2like.OpCreateFleet, Code: "Unsupported", Err: fmt.Errorf(
			"%w: no instance type of families %v with %s vCPUs and %s GiB for %s", domain.ErrInvalidRequest,
			r.Family, ec2like.RangeText(r.CPU), ec2like.RangeText(r.RAM), cmp.Or(arch, "any architecture"))}
	}
	slices.SortFunc(fit, func(a, b typeInfo) int {
		return cmp.Or(cmp.Compare(a.vcpus, b.vcpus), cmp.Compare(a.memMiB, b.memMiB), strings.Compare(a.name, b.name))
	})
	names := make([]string, 0, min(len(fit), MaxTypes))
	for _, t := range fit[:min(len(fit), MaxTypes)] {
		names = append(names, t.name)
	}
	return names, nil
}

func matchesRunner(t typeInfo, r domain.RunnerSpec, arch string) bool {
	if arch != "" && len(t.archs) > 0 && !slices.Contains(t.archs, arch) {
		return false
	}
	if r.Spot != "" && !t.spot {
		return false
	}
	if !ec2like.InRange(t.vcpus, r.CPU) || !ec2like.InRange(t.memMiB, ec2like.RAMMiB(r.RAM)) {
		return false
	}
	if len(r.Family) == 0 {
		return t.current
	}
	family, _, _ := strings.Cut(t.name, ".")
	for _, f := range r.Family {
		if ok, _ := path.Match(f, family); ok || f == family {
			return true
		}
		if ok, _ := path.Match(f, t.name); ok {
			return true
		}
	}
	return false
}

// allTypes reads every instance type of the region once.
func (c *Cloud) allTypes(ctx context.Context) ([]typeInfo, error) {
	c.mu.Lock()
	cached := c.types
	c.mu.Unlock()
	if cached != nil {
		return cached, nil
	}
	var all []typeInfo
	p := ec2.NewDescribeInstanceTypesPaginator(c.api, &ec2.DescribeInstanceTypesInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, mapError("DescribeInstanceTypes", err)
		}
		for _, it := range page.InstanceTypes {
			all = append(all, infoOf(it))
		}
	}
	c.mu.Lock()
	c.types = all
	c.mu.Unlock()
	return all, nil
}

func infoOf(it types.InstanceTypeInfo) typeInfo {
	// What a description leaves out (an emulator's) constrains nothing.
	t := typeInfo{name: string(it.InstanceType), current: it.CurrentGeneration == nil || *it.CurrentGeneration}
	if it.VCpuInfo != nil {
		t.vcpus = int(deref(it.VCpuInfo.DefaultVCpus))
	}
	if it.MemoryInfo != nil {
		t.memMiB = int(deref(it.MemoryInfo.SizeInMiB))
	}
	if it.ProcessorInfo != nil {
		for _, a := range it.ProcessorInfo.SupportedArchitectures {
			t.archs = append(t.archs, string(a))
		}
	}
	t.spot = len(it.SupportedUsageClasses) == 0 || slices.Contains(it.SupportedUsageClasses, types.UsageClassTypeSpot)
	return t
}
