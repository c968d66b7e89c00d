package ec2

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/bullpen-ci/bullpen/internal/cloud/ec2like"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// Create launches spec.Count machines with one instant fleet. The launch's
// own template version carries what every machine of the launch shares
// (image, volume, security groups, instance profile, user data with the
// launch's bootstrap, IMDSv2 required, shutdown terminates); the fleet's
// overrides give one per subnet and allowed instance type, and its tags go
// on the fleet, the instances and their volumes in the same call. The
// fleet request carries spec.ClientToken (the on-demand fallback a token
// derived from it), by which EC2 answers a request the SDK repeats after
// a lost answer with the fleet it launched the first time. Nothing is
// listed before: bullpen calls Create once per launch, with a fresh
// token. A create called again with the token of a launch made before
// finds that launch's machines (see launched). When spot capacity is
// refused, what is missing is launched on-demand (unless
// DisableSpotFallback). A partly fulfilled fleet returns what it launched
// with an error wrapping ErrInsufficientCapacity.
func (c *Cloud) Create(ctx context.Context, spec domain.LaunchSpec) ([]domain.CloudInstance, error) {
	if spec.Count <= 0 {
		return nil, &domain.CloudError{Op: ec2like.OpCreateFleet, Code: "InvalidParameterValue",
			Err: fmt.Errorf("%w: count %d", domain.ErrInvalidRequest, spec.Count)}
	}
	if spec.ClientToken != "" && spec.Tags[domain.TagLaunch] == "" {
		// The launch tag is what finds a launch again: a call with a
		// token and no launch of bullpen's is its own launch.
		spec.Tags = cloneTags(spec.Tags)
		spec.Tags[domain.TagLaunch] = spec.ClientToken
	}
	img, err := c.image(ctx, spec.ImageID, spec.Runner)
	if err != nil {
		return nil, err
	}
	instanceTypes, err := c.InstanceTypes(ctx, spec.Runner, img.architecture)
	if err != nil {
		return nil, err
	}
	version, err := c.templateVersion(ctx, spec, img)
	if err != nil {
		return nil, err
	}
	defer c.dropVersion(ctx, version)

	capacity := types.DefaultTargetCapacityTypeOnDemand
	if spec.Runner.Spot != "" {
		capacity = types.DefaultTargetCapacityTypeSpot
	}
	out, err := c.fleet(ctx, spec, version, instanceTypes, spec.Count, capacity, spec.ClientToken)
	if isCode(err, ec2like.CodeIdempotentMismatch) && spec.Tags[domain.TagLaunch] != "" {
		return c.launched(ctx, spec)
	}
	spotShort := err == nil || errors.Is(err, domain.ErrInsufficientCapacity)
	if spotShort && len(out) < spec.Count && capacity == types.DefaultTargetCapacityTypeSpot && !c.opts.DisableSpotFallback {
		c.opts.Log.Info("spot capacity short; launching the rest on-demand", "runner", spec.Runner.Name,
			"spot", len(out), "on_demand", spec.Count-len(out))
		more, ferr := c.fleet(ctx, spec, version, instanceTypes, spec.Count-len(out),
			types.DefaultTargetCapacityTypeOnDemand, suffixed(spec.ClientToken, "-on-demand"))
		out, err = append(out, more...), ferr
	}
	if err != nil && len(out) == 0 {
		return nil, err
	}
	if len(out) < spec.Count {
		cause := err
		if cause == nil {
			cause = &domain.CloudError{Op: ec2like.OpCreateFleet, Code: "InsufficientInstanceCapacity",
				Err: fmt.Errorf("%w: %d of %d machines", domain.ErrInsufficientCapacity, len(out), spec.Count)}
		}
		return out, cause
	}
	return out, nil
}

func suffixed(token, suffix string) string {
	if token == "" {
		return ""
	}
	return token + suffix
}

// launched returns the live machines of spec's launch, found by its tag,
// once EC2 refused its fleet request as a reuse of a client token for
// another request: the launch was made before, by an earlier call with
// the same token, whose request differed only in the template version
// each call makes. Where none of its machines is listed yet, the refusal
// is returned without its kind, to be retried rather than make the
// provisioner reject the jobs.
func (c *Cloud) launched(ctx context.Context, spec domain.LaunchSpec) ([]domain.CloudInstance, error) {
	out, err := c.List(ctx, domain.CloudFilter{Tags: map[string]string{domain.TagLaunch: spec.Tags[domain.TagLaunch]}})
	if err != nil || len(out) > 0 {
		return out, err
	}
	return nil, &domain.CloudError{Op: ec2like.OpCreateFleet, Code: ec2like.CodeIdempotentMismatch,
		Err: fmt.Errorf("launch %s was made before, and none of its machines is listed yet", spec.Tags[domain.TagLaunch])}
}

// fleet makes one instant fleet request for n machines.
func (c *Cloud) fleet(ctx context.Context, spec domain.LaunchSpec, version templateRef, instanceTypes []string,
	n int, capacity types.DefaultTargetCapacityType, token string) ([]domain.CloudInstance, error) {
	in := &ec2.CreateFleetInput{
		Type: types.FleetTypeInstant,
		LaunchTemplateConfigs: []types.FleetLaunchTemplateConfigRequest{{
			LaunchTemplateSpecification: &types.FleetLaunchTemplateSpecificationRequest{
				LaunchTemplateId: aws.String(version.id), Version: aws.String(strconv.FormatInt(version.number, 10)),
			},
			Overrides: c.overrides(instanceTypes),
		}},
		TargetCapacitySpecification: &types.TargetCapacitySpecificationRequest{
			TotalTargetCapacity: aws.Int32(int32(n)), DefaultTargetCapacityType: capacity,
		},
		TagSpecifications: fleetTagSpecifications(spec.Tags),
	}
	if token != "" {
		in.ClientToken = aws.String(token)
	}
	if capacity == types.DefaultTargetCapacityTypeSpot {
		in.SpotOptions = &types.SpotOptionsRequest{AllocationStrategy: types.SpotAllocationStrategy(spec.Runner.Spot)}
	}
	res, err := c.api.CreateFleet(ctx, in)
	if err != nil {
		err = mapError(ec2like.OpCreateFleet, err)
		if templateGone(err) {
			c.forgetTemplate(version.id) // the next launch makes it again
		}
		return nil, err
	}
	now := c.opts.Clock.Now()
	usage := "on-demand"
	if capacity == types.DefaultTargetCapacityTypeSpot {
		usage = "spot"
	}
	var out []domain.CloudInstance
	for _, fi := range res.Instances {
		for _, id := range fi.InstanceIds {
			out = append(out, domain.CloudInstance{ID: id, State: domain.CloudPending, Tags: cloneTags(spec.Tags),
				InstanceType: string(fi.InstanceType), UsageClass: usage, LaunchedAt: now})
		}
	}
	if len(out) < n && len(res.Errors) > 0 {
		return out, fleetError(res.Errors, in.LaunchTemplateConfigs[0].Overrides, len(out), n)
	}
	return out[:min(len(out), n)], nil
}

// fleetTagSpecifications put a launch's tags on everything its fleet
// request creates: the fleet itself (the IAM policy allows CreateFleet only
// on a fleet carrying the controller tag), its instances and their volumes.
func fleetTagSpecifications(tags map[string]string) []types.TagSpecification {
	var out []types.TagSpecification
	for _, kind := range []types.ResourceType{types.ResourceTypeFleet, types.ResourceTypeInstance, types.ResourceTypeVolume} {
		out = append(out, types.TagSpecification{ResourceType: kind, Tags: ec2Tags(tags)})
	}
	return out
}

// overrides gives one override per subnet and instance type, within EC2's
// limit.
func (c *Cloud) overrides(instanceTypes []string) []types.FleetLaunchTemplateOverridesRequest {
	var out []types.FleetLaunchTemplateOverridesRequest
	for _, t := range instanceTypes {
		for _, s := range c.opts.Subnets {
			if len(out) == maxOverrides {
				return out
			}
			out = append(out, types.FleetLaunchTemplateOverridesRequest{
				InstanceType: types.InstanceType(t), SubnetId: aws.String(s)})
		}
	}
	return out
}

func cloneTags(tags map[string]string) map[string]string {
	out := make(map[string]string, len(tags))
	for k, v := range tags {
		out[k] = v
	}
	return out
}

// templateData is what every machine of a launch shares.
func (c *Cloud) templateData(spec domain.LaunchSpec, img image) (*types.RequestLaunchTemplateData, error) {
	d := &types.RequestLaunchTemplateData{
		ImageId:                           aws.String(img.id),
		InstanceInitiatedShutdownBehavior: types.ShutdownBehaviorTerminate,
		MetadataOptions:                   metadataOptions(),
		SecurityGroupIds:                  c.opts.SecurityGroups,
	}
	if c.opts.InstanceProfile != "" {
		d.IamInstanceProfile = &types.LaunchTemplateIamInstanceProfileSpecificationRequest{}
		if len(c.opts.InstanceProfile) > 4 && c.opts.InstanceProfile[:4] == "arn:" {
			d.IamInstanceProfile.Arn = aws.String(c.opts.InstanceProfile)
		} else {
			d.IamInstanceProfile.Name = aws.String(c.opts.InstanceProfile)
		}
	}
	if v := spec.Runner.Volume; v.SizeGB > 0 && img.rootDevice != "" {
		ebs := &types.LaunchTemplateEbsBlockDeviceRequest{VolumeSize: aws.Int32(int32(v.SizeGB)),
			DeleteOnTermination: aws.Bool(true), Encrypted: aws.Bool(true)}
		if v.Type != "" {
			ebs.VolumeType = types.VolumeType(v.Type)
		}
		if v.ThroughputMBps > 0 {
			ebs.Throughput = aws.Int32(int32(v.ThroughputMBps))
		}
		if v.IOPS > 0 {
			ebs.Iops = aws.Int32(int32(v.IOPS))
		}
		d.BlockDeviceMappings = []types.LaunchTemplateBlockDeviceMappingRequest{{DeviceName: aws.String(img.rootDevice), Ebs: ebs}}
	}
	if c.opts.UserData != nil {
		ud, err := c.opts.UserData(spec.Agent)
		if err != nil {
			return nil, &domain.CloudError{Op: ec2like.OpCreateFleet, Code: "InvalidUserData.Malformed",
				Err: fmt.Errorf("%w: user data: %w", domain.ErrInvalidRequest, err)}
		}
		d.UserData = aws.String(base64.StdEncoding.EncodeToString([]byte(ud)))
	}
	return d, nil
}

// metadataOptions require IMDSv2 (session tokens) on every machine.
func metadataOptions() *types.LaunchTemplateInstanceMetadataOptionsRequest {
	return &types.LaunchTemplateInstanceMetadataOptionsRequest{
		HttpTokens: types.LaunchTemplateHttpTokensStateRequired, HttpEndpoint: types.LaunchTemplateInstanceMetadataEndpointStateEnabled,
		HttpPutResponseHopLimit: aws.Int32(1), // a job's containers cannot reach it
	}
}
