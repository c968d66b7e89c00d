package ec2_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/bullpen-ci/bullpen/internal/clock"
	"github.com/bullpen-ci/bullpen/internal/cloud/ec2"
	"github.com/bullpen-ci/bullpen/internal/domain"
)

// fakeAPI is EC2 where the emulator cannot be: fleets short of capacity,
// refusals, paging. Unset hooks answer as an empty success.
type fakeAPI struct {
	ec2.API // unused methods panic

	mu        sync.Mutex
	fleets    []*awsec2.CreateFleetInput
	fleet     func(n int, in *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error)
	versions  []*awsec2.CreateLaunchTemplateVersionInput
	deleted   []string
	terminate func(ids []string) error
	start     func(ids []string) error
	started   [][]string
	describe  func(ids []string) error // before the pages are answered
	tagged    [][]string
	calls     map[string]int
	pages     [][]types.Instance
	types     []types.InstanceTypeInfo
	images    []types.Image // nil: two x86_64 images, ami-old and ami-new
	imagesErr error         // DescribeImages's refusal
	typesErr  error         // DescribeInstanceTypes's refusal
	// Launch templates: the id by name (nil answers lt-1 to every name),
	// a refusal of a create before it is made (nil: the next id, or
	// AlreadyExists), and a refusal of a new version by template id.
	templates      map[string]string
	createTemplate func(name string) error
	version        func(id string) error
	// deleteVersions answers DeleteLaunchTemplateVersions (nil: every
	// version deleted); deleted records only the versions it deleted.
	deleteVersions func(versions []string) (*awsec2.DeleteLaunchTemplateVersionsOutput, error)
	deleteCalls    [][]string
}

func newFake() *fakeAPI { return &fakeAPI{calls: map[string]int{}} }

func (f *fakeAPI) count(op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op]++
}

func (f *fakeAPI) CreateFleet(_ context.Context, in *awsec2.CreateFleetInput, _ ...func(*awsec2.Options)) (*awsec2.CreateFleetOutput, error) {
	f.mu.Lock()
	f.fleets = append(f.fleets, in)
	n := len(f.fleets)
	f.mu.Unlock()
	if f.fleet == nil {
		return fleetOf(int(*in.TargetCapacitySpecification.TotalTargetCapacity), n), nil
	}
	return f.fleet(n, in)
}

func fleetOf(count, call int) *awsec2.CreateFleetOutput {
	var ids []string
	for i := range count {
		ids = append(ids, fmt.Sprintf("i-%08x%09x", call, i))
	}
	return &awsec2.CreateFleetOutput{Instances: []types.CreateFleetInstance{{InstanceIds: ids, InstanceType: "c7a.large"}}}
}

func (f *fakeAPI) DescribeInstances(_ context.Context, in *awsec2.DescribeInstancesInput, _ ...func(*awsec2.Options)) (*awsec2.DescribeInstancesOutput, error) {
	f.count("DescribeInstances")
	if f.describe != nil {
		if err := f.describe(in.InstanceIds); err != nil {
			return nil, err
		}
	}
	if len(f.pages) == 0 {
		return &awsec2.DescribeInstancesOutput{}, nil
	}
	page := 0
	if in.NextToken != nil {
		fmt.Sscan(*in.NextToken, &page)
	}
	out := &awsec2.DescribeInstancesOutput{Reservations: []types.Reservation{{Instances: f.pages[page]}}}
	if page+1 < len(f.pages) {
		out.NextToken = aws.String(fmt.Sprint(page + 1))
	}
	return out, nil
}

func (f *fakeAPI) DescribeImages(context.Context, *awsec2.DescribeImagesInput, ...func(*awsec2.Options)) (*awsec2.DescribeImagesOutput, error) {
	if f.imagesErr != nil {
		return nil, f.imagesErr
	}
	if f.images != nil {
		return &awsec2.DescribeImagesOutput{Images: f.images}, nil
	}
	return &awsec2.DescribeImagesOutput{Images: []types.Image{
		{ImageId: aws.String("ami-old"), CreationDate: aws.String("2026-01-01T00:00:00.000Z"), RootDeviceName: aws.String("/dev/sda1"), Architecture: "x86_64"},
		{ImageId: aws.String("ami-new"), CreationDate: aws.String("2026-11-01T00:00:00.000Z"), RootDeviceName: aws.String("/dev/xvda"), Architecture: "x86_64"},
	}}, nil
}

func (f *fakeAPI) DescribeInstanceTypes(context.Context, *awsec2.DescribeInstanceTypesInput, ...func(*awsec2.Options)) (*awsec2.DescribeInstanceTypesOutput, error) {
	if f.typesErr != nil {
		return nil, f.typesErr
	}
	return &awsec2.DescribeInstanceTypesOutput{InstanceTypes: f.types}, nil
}

func (f *fakeAPI) DescribeLaunchTemplates(_ context.Context, in *awsec2.DescribeLaunchTemplatesInput, _ ...func(*awsec2.Options)) (*awsec2.DescribeLaunchTemplatesOutput, error) {
	f.count("DescribeLaunchTemplates")
	f.mu.Lock()
	defer f.mu.Unlock()
	id := "lt-1"
	if f.templates != nil {
		id = f.templates[in.LaunchTemplateNames[0]]
	}
	if id == "" {
		return nil, apiError("InvalidLaunchTemplateName.NotFoundException", "At least one of the launch templates specified in the request does not exist.")
	}
	return &awsec2.DescribeLaunchTemplatesOutput{LaunchTemplates: []types.LaunchTemplate{{LaunchTemplateId: aws.String(id)}}}, nil
}

func (f *fakeAPI) CreateLaunchTemplate(_ context.Context, in *awsec2.CreateLaunchTemplateInput, _ ...func(*awsec2.Options)) (*awsec2.CreateLaunchTemplateOutput, error) {
	f.count("CreateLaunchTemplate")
	name := aws.ToString(in.LaunchTemplateName)
	if f.createTemplate != nil {
		if err := f.createTemplate(name); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.templates[name] != "" {
		return nil, apiError("InvalidLaunchTemplateName.AlreadyExistsException", "Launch template name already in use.")
	}
	id := fmt.Sprintf("lt-%d", len(f.templates)+1)
	f.templates[name] = id
	return &awsec2.CreateLaunchTemplateOutput{LaunchTemplate: &types.LaunchTemplate{LaunchTemplateId: aws.String(id)}}, nil
}

func (f *fakeAPI) CreateLaunchTemplateVersion(_ context.Context, in *awsec2.CreateLaunchTemplateVersionInput, _ ...func(*awsec2.Options)) (*awsec2.CreateLaunchTemplateVersionOutput, error) {
	if f.version != nil {
		if err := f.version(aws.ToString(in.LaunchTemplateId)); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.versions = append(f.versions, in)
	return &awsec2.CreateLaunchTemplateVersionOutput{LaunchTemplateVersion: &types.LaunchTemplateVersion{
		VersionNumber: aws.Int64(int64(len(f.versions) + 1))}}, nil
}

func (f *fakeAPI) DeleteLaunchTemplateVersions(_ context.Context, in *awsec2.DeleteLaunchTemplateVersionsInput, _ ...func(*awsec2.Options)) (*awsec2.DeleteLaunchTemplateVersionsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleteCalls = append(f.deleteCalls, in.Versions)
	out := &awsec2.DeleteLaunchTemplateVersionsOutput{}
	if f.deleteVersions != nil {
		var err error
		if out, err = f.deleteVersions(in.Versions); err != nil {
			return nil, err
		}
	}
	for _, v := range in.Versions {
		if !slices.ContainsFunc(out.UnsuccessfullyDeletedLaunchTemplateVersions, func(e types.DeleteLaunchTemplateVersionsResponseErrorItem) bool {
			return fmt.Sprint(aws.ToInt64(e.VersionNumber)) == v
		}) {
			f.deleted = append(f.deleted, v)
		}
	}
	return out, nil
}

func (f *fakeAPI) TerminateInstances(_ context.Context, in *awsec2.TerminateInstancesInput, _ ...func(*awsec2.Options)) (*awsec2.TerminateInstancesOutput, error) {
	f.count("TerminateInstances")
	if f.terminate != nil {
		if err := f.terminate(in.InstanceIds); err != nil {
			return nil, err
		}
	}
	return &awsec2.TerminateInstancesOutput{}, nil
}

func (f *fakeAPI) StartInstances(_ context.Context, in *awsec2.StartInstancesInput, _ ...func(*awsec2.Options)) (*awsec2.StartInstancesOutput, error) {
	f.count("StartInstances")
	if f.start != nil {
		if err := f.start(in.InstanceIds); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, in.InstanceIds)
	return &awsec2.StartInstancesOutput{}, nil
}

func (f *fakeAPI) CreateTags(_ context.Context, in *awsec2.CreateTagsInput, _ ...func(*awsec2.Options)) (*awsec2.CreateTagsOutput, error) {
	f.count("CreateTags")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tagged = append(f.tagged, in.Resources)
	return &awsec2.CreateTagsOutput{}, nil
}

func apiError(code, msg string) error { return &smithy.GenericAPIError{Code: code, Message: msg} }

func newFakeCloud(t *testing.T, f *fakeAPI, o ec2.Options) *ec2.Cloud {
	t.Helper()
	if f.types == nil {
		f.types = typeList("c7a.large:2:4096", "c7a.xlarge:4:8192", "m7a.large:2:8192", "m7a.xlarge:4:16384", "r7a.large:2:16384")
	}
	o.Subnets = []string{"subnet-a", "subnet-b"}
	o.Clock, o.Log = clock.NewVirtual(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)), slog.New(slog.DiscardHandler)
	o.UserData = func(b domain.AgentBootstrap) (string, error) { return "#!/bin/sh\nlaunch=" + b.LaunchID, nil }
	c, err := ec2.New(f, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// typeList reads "name:vcpus:mib" entries as DescribeInstanceTypes answers.
func typeList(entries ...string) []types.InstanceTypeInfo {
	var out []types.InstanceTypeInfo
	for _, e := range entries {
		var vcpus int32
		var mib int64
		parts := strings.Split(e, ":")
		fmt.Sscan(parts[1], &vcpus)
		fmt.Sscan(parts[2], &mib)
		out = append(out, types.InstanceTypeInfo{InstanceType: types.InstanceType(parts[0]),
			VCpuInfo: &types.VCpuInfo{DefaultVCpus: aws.Int32(vcpus)}, MemoryInfo: &types.MemoryInfo{SizeInMiB: aws.Int64(mib)},
			ProcessorInfo:         &types.ProcessorInfo{SupportedArchitectures: []types.ArchitectureType{"x86_64"}},
			SupportedUsageClasses: []types.UsageClassType{"on-demand", "spot"}, CurrentGeneration: aws.Bool(true)})
	}
	return out
}

func launchSpec(n int, runner domain.RunnerSpec) domain.LaunchSpec {
	return domain.LaunchSpec{Runner: runner, ImageID: "runner-image", Count: n, ClientToken: "lt-1",
		Tags:  map[string]string{domain.TagController: "c", domain.TagLaunch: "lt-1"},
		Agent: domain.AgentBootstrap{URL: "https://cp", LaunchID: "lt-1", Secret: "s3cret"}}
}

var small = domain.RunnerSpec{Name: "small", Family: []string{"c7a", "m7a"}, CPU: domain.Range{Min: 2, Max: 4},
	RAM: domain.Range{Min: 4, Max: 8}, Volume: domain.Volume{Type: "gp3", SizeGB: 40, ThroughputMBps: 125, IOPS: 3000}}

// One fleet: its own template version (image, volume, IMDSv2, shutdown
// terminates, user data), deleted after the call; one override per subnet
// and allowed type; the tags on the fleet, its instances and volumes.
func TestCreateMakesOneFleetFromTheLaunchsOwnTemplateVersion(t *testing.T) {
	f := newFake()
	c := newFakeCloud(t, f, ec2.Options{})
	ms, err := c.Create(t.Context(), launchSpec(3, small))
	if err != nil || len(ms) != 3 {
		t.Fatalf("create: %d machines, %v", len(ms), err)
	}
	if len(f.fleets) != 1 || len(f.versions) != 1 || !slices.Equal(f.deleted, []string{"2"}) {
		t.Fatalf("%d fleets, %d versions, deleted %v; want one of each, the version deleted", len(f.fleets), len(f.versions), f.deleted)
	}
	d := f.versions[0].LaunchTemplateData
	if aws.ToString(d.ImageId) != "ami-new" || d.InstanceInitiatedShutdownBehavior != types.ShutdownBehaviorTerminate ||
		d.MetadataOptions.HttpTokens != types.LaunchTemplateHttpTokensStateRequired {
		t.Errorf("template data: image %s shutdown %s tokens %s", aws.ToString(d.ImageId), d.InstanceInitiatedShutdownBehavior, d.MetadataOptions.HttpTokens)
	}
	if v := d.BlockDeviceMappings[0]; aws.ToString(v.DeviceName) != "/dev/xvda" || aws.ToInt32(v.Ebs.VolumeSize) != 40 ||
		v.Ebs.VolumeType != types.VolumeTypeGp3 || aws.ToInt32(v.Ebs.Iops) != 3000 || aws.ToInt32(v.Ebs.Throughput) != 125 {
		t.Errorf("root volume %+v", v)
	}
	if d.UserData == nil {
		t.Error("no user data")
	}
	in := f.fleets[0]
	var over []string
	for _, o := range in.LaunchTemplateConfigs[0].Overrides {
		over = append(over, string(o.InstanceType)+"@"+aws.ToString(o.SubnetId))
	}
	want := []string{"c7a.large@subnet-a", "c7a.large@subnet-b", "m7a.large@subnet-a", "m7a.large@subnet-b",
		"c7a.xlarge@subnet-a", "c7a.xlarge@subnet-b"}
	if !slices.Equal(over, want) {
		t.Errorf("overrides %v, want %v (cheapest first, r7a and 16 GiB left out)", over, want)
	}
	if in.Type != types.FleetTypeInstant || len(in.TagSpecifications) != 3 ||
		in.TagSpecifications[2].ResourceType != types.ResourceTypeVolume || aws.ToString(in.ClientToken) != "lt-1" {
		t.Errorf("fleet request: type %s, %d tag specifications, token %q", in.Type, len(in.TagSpecifications), aws.ToString(in.ClientToken))
	}
}

// A launch lists nothing before its fleet request, whose client token is
// what keeps EC2 from launching twice: a throttled DescribeInstances
// cannot fail it.
func TestALaunchListsNothingBeforeItsFleet(t *testing.T) {
	f := newFake()
	f.describe = func([]string) error { return apiError("RequestLimitExceeded", "Request limit exceeded.") }
	ms, err := newFakeCloud(t, f, ec2.Options{}).Create(t.Context(), launchSpec(2, small))
	if err != nil || len(ms) != 2 || f.calls["DescribeInstances"] != 0 {
		t.Fatalf("%d machines, %v after %d DescribeInstances; want 2 and none", len(ms), err, f.calls["DescribeInstances"])
	}
}

// A create called again for a launch made before makes a new template
// version, so EC2 refuses its fleet request as another request under the
// same token: the launch's machines are listed by its tag and returned,
// none launched twice.
func TestACreateCalledAgainReturnsItsLaunchsMachines(t *testing.T) {
	f := newFake()
	f.fleet = func(n int, in *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error) {
		if n > 1 {
			return nil, apiError("IdempotentParameterMismatch", "Client token already used before.")
		}
		return fleetOf(2, n), nil
	}
	c := newFakeCloud(t, f, ec2.Options{})
	first, err := c.Create(t.Context(), launchSpec(2, small))
	if err != nil {
		t.Fatal(err)
	}
	var page []types.Instance
	for _, m := range first {
		page = append(page, types.Instance{InstanceId: aws.String(m.ID), State: &types.InstanceState{Name: types.InstanceStateNameRunning}})
	}
	f.pages = [][]types.Instance{page}
	again, err := c.Create(t.Context(), launchSpec(2, small))
	if err != nil || len(again) != 2 || again[0].ID != first[0].ID || again[1].ID != first[1].ID {
		t.Fatalf("again: %v, %v; want the machines of the first call", again, err)
	}
}

// A fleet short of capacity returns what it launched, with the code.
func TestAPartialFleetReturnsWhatItGotAndTheCode(t *testing.T) {
	f := newFake()
	f.fleet = func(n int, in *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error) {
		out := fleetOf(2, n)
		out.Errors = []types.CreateFleetError{{ErrorCode: aws.String("InsufficientInstanceCapacity"), ErrorMessage: aws.String("no c7a in us-east-1a")}}
		return out, nil
	}
	c := newFakeCloud(t, f, ec2.Options{})
	ms, err := c.Create(t.Context(), launchSpec(5, small))
	var ce *domain.CloudError
	if len(ms) != 2 || !errors.Is(err, domain.ErrInsufficientCapacity) || !errors.As(err, &ce) || ce.Code != "InsufficientInstanceCapacity" {
		t.Fatalf("%d machines, %v; want 2 and InsufficientInstanceCapacity", len(ms), err)
	}
}

// Spot refused: the rest comes on-demand, in a second fleet of its own.
func TestSpotShortFallsBackToOnDemand(t *testing.T) {
	f := newFake()
	f.fleet = func(n int, in *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error) {
		if n == 1 {
			out := fleetOf(1, n)
			out.Errors = []types.CreateFleetError{{ErrorCode: aws.String("InsufficientInstanceCapacity")}}
			return out, nil
		}
		return fleetOf(int(*in.TargetCapacitySpecification.TotalTargetCapacity), n), nil
	}
	spot := small
	spot.Spot = "price-capacity-optimized"
	c := newFakeCloud(t, f, ec2.Options{})
	ms, err := c.Create(t.Context(), launchSpec(3, spot))
	if err != nil || len(ms) != 3 {
		t.Fatalf("%d machines, %v; want 3", len(ms), err)
	}
	first, second := f.fleets[0], f.fleets[1]
	if first.TargetCapacitySpecification.DefaultTargetCapacityType != types.DefaultTargetCapacityTypeSpot ||
		first.SpotOptions.AllocationStrategy != types.SpotAllocationStrategyPriceCapacityOptimized {
		t.Errorf("first fleet %s %+v, want spot, price-capacity-optimized", first.TargetCapacitySpecification.DefaultTargetCapacityType, first.SpotOptions)
	}
	if second.TargetCapacitySpecification.DefaultTargetCapacityType != types.DefaultTargetCapacityTypeOnDemand ||
		aws.ToInt32(second.TargetCapacitySpecification.TotalTargetCapacity) != 2 || aws.ToString(second.ClientToken) != "lt-1-on-demand" {
		t.Errorf("fallback fleet %+v token %q", second.TargetCapacitySpecification, aws.ToString(second.ClientToken))
	}
	if ms[0].UsageClass != "spot" || ms[2].UsageClass != "on-demand" {
		t.Errorf("usage classes %s, %s", ms[0].UsageClass, ms[2].UsageClass)
	}
}

// Refusals keep EC2's code and map to the port's typed errors.
func TestFleetRefusalsMapToTypedErrors(t *testing.T) {
	for code, want := range map[string]error{
		"InvalidAMIID.NotFound":        domain.ErrUnknownImage,
		"Unsupported":                  domain.ErrInvalidRequest,
		"RequestLimitExceeded":         domain.ErrThrottled,
		"UnauthorizedOperation":        domain.ErrUnauthorized,
		"AuthFailure":                  domain.ErrUnauthorized,
		"RequestExpired":               domain.ErrUnauthorized,
		"ExpiredToken":                 domain.ErrUnauthorized,
		"Throttling":                   domain.ErrThrottled,
		"InsufficientInstanceCapacity": domain.ErrInsufficientCapacity,
		// A subnet out of addresses gets some back as machines end.
		"InsufficientFreeAddressesInSubnet": domain.ErrInsufficientCapacity,
		"InvalidParameterValue":             domain.ErrInvalidRequest,
		"MissingParameter":                  domain.ErrInvalidRequest,
		"InvalidSubnetID.NotFound":          domain.ErrInvalidRequest,
		"InvalidGroup.NotFound":             domain.ErrInvalidRequest,
		"InvalidUserData.Malformed":         domain.ErrInvalidRequest,
		"UnsupportedOperation":              domain.ErrInvalidRequest,
	} {
		f := newFake()
		f.fleet = func(int, *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error) {
			return nil, apiError(code, "refused")
		}
		_, err := newFakeCloud(t, f, ec2.Options{}).Create(t.Context(), launchSpec(1, small))
		var ce *domain.CloudError
		if !errors.Is(err, want) || !errors.As(err, &ce) || ce.Code != code || ce.Op != "CreateFleet" {
			t.Errorf("%s: %v, want %v with the code", code, err, want)
		}
		if len(f.deleted) != 1 {
			t.Errorf("%s: the launch's template version was not deleted", code)
		}
	}
}

// A refusal of the credentials keeps its code but not AWS's message, which
// may quote the signed request, a session token's header among it.
func TestARefusalOfTheCredentialsShowsNoMessage(t *testing.T) {
	f := newFake()
	f.fleet = func(int, *awsec2.CreateFleetInput) (*awsec2.CreateFleetOutput, error) {
		return nil, apiError("AuthFailure", "canonical request: x-amz-security-token:SESSIONSECRET")
	}
	_, err := newFakeCloud(t, f, ec2.Options{}).Create(t.Context(), launchSpec(1, small))
	var ce *domain.CloudError
	if !errors.Is(err, domain.ErrUnauthorized) || !errors.As(err, &ce) || ce.Code != "AuthFailure" || strings.Contains(err.Error(), "SESSIONSECRET") {
		t.Fatalf("got %v", err)
	}
}

// A runner no instance type fits is refused before any call is made.
func TestARunnerNoTypeFitsIsRefused(t *testing.T) {
	f := newFake()
	huge := small
	huge.CPU = domain.Range{Min: 96, Max: 96}
	_, err := newFakeCloud(t, f, ec2.Options{}).Create(t.Context(), launchSpec(1, huge))
	if !errors.Is(err, domain.ErrInvalidRequest) || !strings.Contains(err.Error(), "no instance type") || len(f.fleets) != 0 {
		t.Fatalf("%v after %d fleets; want a refusal naming the runner's needs, no fleet", err, len(f.fleets))
	}
}

// List reads every page (the emulator ignores MaxResults).
func TestListReadsEveryPage(t *testing.T) {
	f := newFake()
	for p := range 3 {
		var page []types.Instance
		for i := range 2 {
			page = append(page, types.Instance{InstanceId: aws.String(fmt.Sprintf("i-%08x%09x", p, i)),
				State: &types.InstanceState{Name: types.InstanceStateNameRunning}, LaunchTime: aws.Time(time.Unix(int64(p*10+i), 0))})
		}
		f.pages = append(f.pages, page)
	}
	got, err := newFakeCloud(t, f, ec2.Options{}).List(t.Context(), domain.CloudFilter{Tags: map[string]string{"k": "v"}})
	if err != nil || len(got) != 6 || f.calls["DescribeInstances"] != 3 {
		t.Fatalf("%d machines in %d calls, %v; want 6 in 3", len(got), f.calls["DescribeInstances"], err)
	}
}

// EC2 fails a whole terminate on one unknown id: the others are
// terminated in a second call, and the unknown one is named.
func TestTerminateSkipsAnUnknownIDAndGoesOn(t *testing.T) {
	f := newFake()
	var done [][]string
	f.terminate = func(ids []string) error {
		if slices.Contains(ids, "i-0000000000000dead") {
			return apiError("InvalidInstanceID.NotFound", "The instance ID 'i-0000000000000dead' does not exist")
		}
		done = append(done, ids)
		return nil
	}
	err := newFakeCloud(t, f, ec2.Options{}).Terminate(t.Context(), []string{"i-0aaaaaaaaaaaaaaaa", "i-0000000000000dead", "i-0bbbbbbbbbbbbbbbb"})
	if !errors.Is(err, domain.ErrUnknownInstance) || !slices.Equal(domain.UnknownIDs(err), []string{"i-0000000000000dead"}) {
		t.Fatalf("err %v, want the unknown id named", err)
	}
	if len(done) != 1 || len(done[0]) != 2 {
		t.Fatalf("terminated %v, want the two known ids in one call", done)
	}
}

// Instance types follow the runner's family, cpu and ram, and the image's
// architecture.
func TestInstanceTypesFollowTheRunner(t *testing.T) {
	f := newFake()
	f.types = append(typeList("c7a.large:2:4096", "c7g.large:2:4096", "m7a.2xlarge:8:32768", "t3.micro:2:1024"), types.InstanceTypeInfo{
		InstanceType: "c7g.xlarge", VCpuInfo: &types.VCpuInfo{DefaultVCpus: aws.Int32(4)}, MemoryInfo: &types.MemoryInfo{SizeInMiB: aws.Int64(8192)},
		ProcessorInfo: &types.ProcessorInfo{SupportedArchitectures: []types.ArchitectureType{"arm64"}}})
	c := newFakeCloud(t, f, ec2.Options{})
	for _, tc := range []struct {
		runner domain.RunnerSpec
		arch   string
		want   []string
	}{
		{domain.RunnerSpec{Family: []string{"c7*"}}, "x86_64", []string{"c7a.large", "c7g.large"}},
		{domain.RunnerSpec{Family: []string{"c7*"}}, "arm64", []string{"c7g.xlarge"}},
		{domain.RunnerSpec{CPU: domain.Range{Min: 8}}, "x86_64", []string{"m7a.2xlarge"}},
		{domain.RunnerSpec{RAM: domain.Range{Min: 1, Max: 1}}, "x86_64", []string{"t3.micro"}},
	} {
		got, err := c.InstanceTypes(t.Context(), tc.runner, tc.arch)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%+v on %s: %v, %v; want %v", tc.runner, tc.arch, got, err, tc.want)
		}
	}
}

// A name matching images of two architectures (as Ubuntu's names do) gives
// each runner the newest image its instance types can boot, not the newest
// of all, which an arm64 runner could not launch.
func TestAnImageNameOfSeveralArchitecturesFollowsTheRunner(t *testing.T) {
	f := newFake()
	f.types = append(typeList("c7a.large:2:4096"), types.InstanceTypeInfo{
		InstanceType: "c7g.large", VCpuInfo: &types.VCpuInfo{DefaultVCpus: aws.Int32(2)}, MemoryInfo: &types.MemoryInfo{SizeInMiB: aws.Int64(4096)},
		ProcessorInfo: &types.ProcessorInfo{SupportedArchitectures: []types.ArchitectureType{"arm64"}}, CurrentGeneration: aws.Bool(true)})
	f.images = []types.Image{
		{ImageId: aws.String("ami-arm"), CreationDate: aws.String("2026-10-01T00:00:00.000Z"), Architecture: "arm64"},
		{ImageId: aws.String("ami-x86"), CreationDate: aws.String("2026-11-01T00:00:00.000Z"), Architecture: "x86_64"},
		{ImageId: aws.String("ami-x86-old"), CreationDate: aws.String("2026-01-01T00:00:00.000Z"), Architecture: "x86_64"},
	}
	c := newFakeCloud(t, f, ec2.Options{})
	for _, tc := range []struct {
		runner domain.RunnerSpec
		want   string
	}{
		{domain.RunnerSpec{Name: "arm", Family: []string{"c7g"}}, "ami-arm"},
		{domain.RunnerSpec{Name: "x86", Family: []string{"c7a"}}, "ami-x86"},
		{domain.RunnerSpec{Name: "any"}, "ami-x86"},
	} {
		if got, err := c.ResolveImage(t.Context(), "ubuntu-24.04-*", tc.runner); err != nil || got != tc.want {
			t.Errorf("runner %s: %q, %v; want %s", tc.runner.Name, got, err, tc.want)
		}
	}
	_, err := c.ResolveImage(t.Context(), "ubuntu-24.04-*", domain.RunnerSpec{Name: "graviton4", Family: []string{"r8g"}})
	if !errors.Is(err, domain.ErrInvalidRequest) || !strings.Contains(err.Error(), "arm64, x86_64") || !strings.Contains(err.Error(), "graviton4") {
		t.Errorf("a runner no image's architecture fits: %v, want the architectures and the runner named", err)
	}
}
